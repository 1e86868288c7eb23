// Package fleetsim simulates a fleet of termd devices that update
// themselves (issue 28), for the rollout tests and figures: each device
// is a real link.Client on a real WebSocket, listing "update" with a
// platform and a version. On an update frame it downloads the binary
// from the frame's url over HTTP with its own credentials (real bytes;
// the size and SHA-256 checked against the frame's manifest), reports
// downloading then restarting, and reconnects as a new client running
// the new version, which reports installed, as termd does after its
// health gate. A device chosen to fail reconnects on its old version and
// reports rolled_back with a reason (as termd's start report does after
// its supervisor reverted a release).
//
// It is a package of its own rather than a mode of termrig load: load
// sends messages over raw frames to measure the message path, while a
// simulated updater needs the link client's fleet side (Client.Fleet,
// Client.Report and its resend on each connect, ResolveURL, HTTPClient).
package fleetsim

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"termlink/link"
	"termlink/release"
)

// Options configure a simulated fleet.
type Options struct {
	URL      string // the channel's WebSocket URL
	N        int    // devices
	Prefix   string // peer ids are Prefix + 3 digits (default "sim-")
	Platform string // default linux/arm/6
	Version  string // the version each runs at start (default v1)
	Token    string // the channel token (Authorization: Bearer), if the channel takes only tokens
	Tags     map[string]string
	// Fail lists the peers whose update fails its health gate: they
	// report rolled_back with FailReason.
	Fail       []string
	FailReason string
	Heartbeat  time.Duration // default 30 s
	Log        *slog.Logger
}

// Device is one simulated device.
type Device struct {
	ID      string
	fleet   *Fleet
	version atomic.Value // string
	bytes   atomic.Int64 // binary bytes downloaded
	updates atomic.Int64 // update frames taken
	// failedAt is when the device, "restarted" after its release failed,
	// began to connect to report rolled_back (unix ns; 0: never).
	failedAt atomic.Int64
}

// FailedAt is when the device began to report its rollback (zero: it
// has not).
func (d *Device) FailedAt() time.Time {
	if n := d.failedAt.Load(); n != 0 {
		return time.Unix(0, n)
	}
	return time.Time{}
}

// Version is the version the device runs now.
func (d *Device) Version() string { return d.version.Load().(string) }

// Bytes is how many bytes of binaries the device downloaded.
func (d *Device) Bytes() int64 { return d.bytes.Load() }

// Updates is how many update frames the device took.
func (d *Device) Updates() int64 { return d.updates.Load() }

// Fleet is the running simulated fleet.
type Fleet struct {
	opt     Options
	Devices []*Device
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	errMu   sync.Mutex
	errs    []error
}

// Start connects opt.N devices; Close stops them.
func Start(ctx context.Context, opt Options) (*Fleet, error) {
	if opt.N <= 0 {
		return nil, errors.New("fleetsim: N must be at least 1")
	}
	if opt.Prefix == "" {
		opt.Prefix = "sim-"
	}
	if opt.Platform == "" {
		opt.Platform = "linux/arm/6"
	}
	if opt.Version == "" {
		opt.Version = "v1"
	}
	if opt.FailReason == "" {
		opt.FailReason = "health gate: no heartbeat answered within the gate"
	}
	if opt.Heartbeat <= 0 {
		opt.Heartbeat = 30 * time.Second
	}
	if opt.Log == nil {
		opt.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	ctx, cancel := context.WithCancel(ctx)
	f := &Fleet{opt: opt, cancel: cancel}
	for i := 0; i < opt.N; i++ {
		d := &Device{ID: fmt.Sprintf("%s%03d", opt.Prefix, i+1), fleet: f}
		d.version.Store(opt.Version)
		f.Devices = append(f.Devices, d)
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			d.run(ctx)
		}()
	}
	return f, nil
}

// Close stops every device and waits for them.
func (f *Fleet) Close() error {
	f.cancel()
	f.wg.Wait()
	f.errMu.Lock()
	defer f.errMu.Unlock()
	return errors.Join(f.errs...)
}

// Versions counts the devices by the version they run.
func (f *Fleet) Versions() map[string]int {
	out := map[string]int{}
	for _, d := range f.Devices {
		out[d.Version()]++
	}
	return out
}

// Bytes is the binary bytes every device downloaded.
func (f *Fleet) Bytes() int64 {
	var n int64
	for _, d := range f.Devices {
		n += d.Bytes()
	}
	return n
}

// Errors are the devices' download failures so far (a bad size or hash,
// an HTTP refusal).
func (f *Fleet) Errors() []error {
	f.errMu.Lock()
	defer f.errMu.Unlock()
	return slices.Clone(f.errs)
}

func (f *Fleet) fail(err error) {
	f.errMu.Lock()
	f.errs = append(f.errs, err)
	f.errMu.Unlock()
}

// run is one device: a client per running version, until ctx ends.
func (d *Device) run(ctx context.Context) {
	opt := d.fleet.opt
	var status *link.UpdateStatus // reported on the next client's connect
	for ctx.Err() == nil {
		c, err := link.NewClient(link.ClientConfig{URL: opt.URL, PeerID: d.ID, DeviceName: d.ID, Token: opt.Token,
			Outbox: link.NewMemoryOutbox(), Capabilities: []string{link.CapText, link.CapUpdate}, Version: d.Version(),
			Platform: opt.Platform, Tags: opt.Tags, Heartbeat: opt.Heartbeat, Logger: opt.Log,
			RetryInitial: 50 * time.Millisecond, RetryMax: 2 * time.Second})
		if err != nil {
			d.fleet.fail(fmt.Errorf("%s: %w", d.ID, err))
			return
		}
		if status != nil {
			if status.State == link.UpdateRolledBack {
				d.failedAt.Store(time.Now().UnixNano())
			}
			_ = c.Report(status)
		}
		runDone := make(chan struct{})
		go func() {
			defer close(runDone)
			_ = c.Run(ctx)
		}()
		go func() { // the events are not this simulation's business
			for range c.Events() {
			}
		}()
		status = d.serve(ctx, c)
		_ = c.Close()
		<-runDone
	}
}

// serve takes update frames until one is applied: it returns the status
// the next client (the "restarted" device) reports.
func (d *Device) serve(ctx context.Context, c *link.Client) *link.UpdateStatus {
	opt := d.fleet.opt
	for {
		var fr link.Frame
		select {
		case <-ctx.Done():
			return nil
		case f, ok := <-c.Fleet():
			if !ok { // the client ended
				return nil
			}
			fr = f
		}
		u, ok := fr.(*link.Update)
		if !ok {
			continue
		}
		d.updates.Add(1)
		st := &link.UpdateStatus{UpdateID: u.UpdateID, Version: u.Version, Running: d.Version()}
		if u.Version == d.Version() {
			st.State = link.UpdateInstalled
			_ = c.Report(st)
			continue
		}
		st.State = link.UpdateDownloading
		_ = c.Report(st)
		if err := d.download(ctx, c, u); err != nil {
			d.fleet.fail(fmt.Errorf("%s: %w", d.ID, err))
			_ = c.Report(&link.UpdateStatus{UpdateID: u.UpdateID, Version: u.Version, Running: d.Version(), State: link.UpdateFailed, Reason: err.Error()})
			continue
		}
		// The "restart" may overtake this report: the new client's start
		// report names the attempt (as termd's does), so the server
		// orders them by what they say, not by when they came.
		_ = c.Report(&link.UpdateStatus{UpdateID: u.UpdateID, Version: u.Version, Running: d.Version(), State: link.UpdateRestarting})
		if slices.Contains(opt.Fail, d.ID) {
			return &link.UpdateStatus{UpdateID: u.UpdateID, Version: u.Version, Running: d.Version(), State: link.UpdateRolledBack, Reason: opt.FailReason}
		}
		d.version.Store(u.Version)
		return &link.UpdateStatus{UpdateID: u.UpdateID, Version: u.Version, Running: u.Version, State: link.UpdateInstalled}
	}
}

// download fetches the frame's binary with the device's credentials and
// checks it against the manifest.
func (d *Device) download(ctx context.Context, c *link.Client, u *link.Update) error {
	m, err := release.ParseManifest([]byte(u.Manifest))
	if err != nil {
		return err
	}
	src, err := c.ResolveURL(u.URL)
	if err != nil {
		return err
	}
	hc, err := c.HTTPClient()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, src, nil)
	if err != nil {
		return err
	}
	if tok := d.fleet.opt.Token; tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
		return fmt.Errorf("download %s: HTTP %d %s", src, resp.StatusCode, b)
	}
	h := sha256.New()
	n, err := io.Copy(h, io.LimitReader(resp.Body, m.Size+1))
	d.bytes.Add(n)
	if err != nil {
		return fmt.Errorf("download %s: %w", src, err)
	}
	if n != m.Size {
		return fmt.Errorf("download %s: %d bytes, the manifest says %d", src, n, m.Size)
	}
	if sum := hex.EncodeToString(h.Sum(nil)); sum != m.SHA256 {
		return fmt.Errorf("download %s: sha256 %s, the manifest says %s", src, sum, m.SHA256)
	}
	return nil
}
