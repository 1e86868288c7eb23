package main

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"termlink/server"
	"termlink/server/config"
)

// tlsFlags applies --tls-cert and --tls-key over the config's tls block.
func tlsFlags(cfg *config.Config, cert, key string) error {
	if cert == "" && key == "" {
		return nil
	}
	if cert == "" || key == "" {
		return errors.New("--tls-cert and --tls-key go together: give both")
	}
	cfg.TLS = config.TLS{CertFile: cert, KeyFile: key}
	return nil
}

// reloadOnHUP takes SIGHUP from now on (it never stops termserver, with
// TLS or without) and, until ctx ends, reads the TLS certificate and key
// again on each, and, with a config file, the channels' clientCA files
// and denyCerts lists; what does not load leaves what is in use (the
// server logs why). Without TLS it logs that there is nothing to reload.
func reloadOnHUP(ctx context.Context, srv *server.Server, log *slog.Logger, cfgPath string) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP) // before returning: a SIGHUP from now on does not kill termserver
	go func() {
		defer signal.Stop(hup)
		serveHUP(ctx, hup, srv, log, cfgPath)
	}()
}

func serveHUP(ctx context.Context, hup <-chan os.Signal, srv *server.Server, log *slog.Logger, cfgPath string) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			if !srv.TLSEnabled() {
				log.Info("SIGHUP: nothing to reload (no TLS configured; other settings take effect at a restart)")
				continue
			}
			log.Info("SIGHUP: reloading the TLS certificate (other settings take effect at a restart)")
			_ = srv.ReloadTLS()
			if cfgPath == "" {
				continue
			}
			cfg, err := config.Load(cfgPath)
			if err == nil {
				err = srv.ReloadClientCerts(cfg)
			}
			if err != nil {
				log.Error("client CAs and deny lists not reloaded: keeping the current ones", "err", err)
			}
		}
	}
}
