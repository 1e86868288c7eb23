package cluster

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
)

// embeddedRun is a nats-server running in this process.
type embeddedRun struct {
	s   *natsserver.Server
	log *fileLogger
}

func (r embeddedRun) stop(ctx context.Context) error {
	done := make(chan struct{})
	go func() {
		r.s.Shutdown()
		r.s.WaitForShutdown()
		close(done)
	}()
	defer r.log.close()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("shutdown: %w", ctx.Err())
	}
}

func (r embeddedRun) kill() { _ = r.stop(context.Background()) }

func (r embeddedRun) exited() bool { return !r.s.Running() }

// startEmbedded runs the node in this process. It listens on its ports
// like a process does: a server with DontListen cannot form cluster
// routes.
func (n *NATSNode) startEmbedded() (natsRun, error) {
	opts := &natsserver.Options{
		ServerName: n.Name,
		Host:       "127.0.0.1",
		Port:       n.ClientPort,
		HTTPHost:   "127.0.0.1",
		HTTPPort:   n.MonitorPort,
		JetStream:  true,
		StoreDir:   n.StoreDir,
		NoSigs:     true,
		SyncAlways: n.syncAlways,
	}
	if len(n.routes) > 1 { // alone, a clustered node elects no meta leader
		// NoAdvertise: as in natsConfig, a client knows only its URLs.
		opts.Cluster = natsserver.ClusterOpts{Name: n.clusterName, Host: "127.0.0.1", Port: n.ClusterPort, NoAdvertise: true}
		opts.Routes = natsserver.RoutesFromStr(strings.Join(n.routes, ","))
	}
	s, err := natsserver.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("nats %s: %w", n.Name, err)
	}
	lg, err := openFileLogger(n.LogFile)
	if err != nil {
		return nil, fmt.Errorf("nats %s: %w", n.Name, err)
	}
	s.SetLogger(lg, false, false)
	s.Start()
	if !s.ReadyForConnections(30 * time.Second) {
		s.Shutdown()
		s.WaitForShutdown()
		lg.close()
		if lg.fatalAddrInUse() {
			return nil, fmt.Errorf("nats %s: %w", n.Name, errAddrInUse)
		}
		return nil, fmt.Errorf("nats %s: not ready for connections; log:\n%s", n.Name, logTail(n.LogFile, 20))
	}
	return embeddedRun{s: s, log: lg}, nil
}

// fileLogger is a nats-server Logger that appends to a file. Fatalf does
// not exit the process (the server's own logger would): it records the
// failure, and the node is reported as not ready.
type fileLogger struct {
	mu     sync.Mutex
	f      *os.File
	fatals []string
}

func openFileLogger(path string) (*fileLogger, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	return &fileLogger{f: f}, nil
}

func (l *fileLogger) logf(level, format string, v []any) string {
	line := fmt.Sprintf(format, v...)
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f != nil {
		fmt.Fprintf(l.f, "%s [%s] %s\n", time.Now().Format("15:04:05.000000"), level, line)
	}
	return line
}

func (l *fileLogger) close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f != nil {
		_ = l.f.Close()
		l.f = nil
	}
}

func (l *fileLogger) fatalAddrInUse() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, f := range l.fatals {
		if strings.Contains(f, "address already in use") {
			return true
		}
	}
	return false
}

func (l *fileLogger) Noticef(format string, v ...any) { l.logf("INF", format, v) }
func (l *fileLogger) Warnf(format string, v ...any)   { l.logf("WRN", format, v) }
func (l *fileLogger) Errorf(format string, v ...any)  { l.logf("ERR", format, v) }
func (l *fileLogger) Debugf(format string, v ...any)  { l.logf("DBG", format, v) }
func (l *fileLogger) Tracef(format string, v ...any)  { l.logf("TRC", format, v) }
func (l *fileLogger) Fatalf(format string, v ...any) {
	line := l.logf("FTL", format, v)
	l.mu.Lock()
	l.fatals = append(l.fatals, line)
	l.mu.Unlock()
}
