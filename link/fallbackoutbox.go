package link

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// DefaultStorageRetry is how often a FallbackOutbox in memory tries its
// state dir again.
const DefaultStorageRetry = 10 * time.Second

// FallbackOptions tune OpenFallbackOutbox.
type FallbackOptions struct {
	FileOutboxOptions
	// RetryEvery is how often to try the state dir again while the
	// messages are kept in memory (default DefaultStorageRetry).
	RetryEvery time.Duration
	// OnChange, when set, is called after the outbox went to memory (err
	// says why; also from OpenFallbackOutbox when it opens in memory) or
	// back to the state dir (nil). Calls do not overlap and each passes
	// the state at its time, so the last call tells how things are. The
	// outbox's methods may be called from it.
	OnChange func(err error)
}

// FallbackOutbox is the outbox a Client keeps in its StateDir: a
// FileOutbox while the state dir can be written, and the messages in
// memory while it cannot (disk full, read-only, a file or directory in
// the way), so that a device with a broken disk still starts, shows the
// problem and sends its messages.
//
// It goes to memory when opening the FileOutbox fails or one of its
// writes fails; the pending messages come along (at start, those of a
// readable but unwritable file). Every RetryEvery it opens the state dir
// again; once that works, the messages added in memory are written to
// the file with their ids and those answered meanwhile are marked done,
// and it is durable again. Messages kept in memory are lost if the
// process ends before the disk is back; a second process on the state
// dir (its lock held) is an error, not a fallback.
type FallbackOutbox struct {
	dir string
	opt FallbackOptions
	log *slog.Logger

	reportMu sync.Mutex // serializes OnChange

	mu       sync.Mutex
	file     *FileOutbox     // nil while in memory
	mem      *MemoryOutbox   // the messages while file == nil
	fromFile map[string]bool // ids mem took from the file: done there if answered meanwhile
	problem  error           // why in memory; nil while durable
	closed   bool

	stop chan struct{}
	done chan struct{}
}

// ErrStateDirInUse: another process holds the state dir's lock.
var ErrStateDirInUse = errors.New("state dir is in use by another process")

// OpenFallbackOutbox opens the outbox in dir, in memory when the state
// dir cannot be used (Problem says why). It fails only for an empty dir
// or a state dir another process holds. Close stops its retries.
func OpenFallbackOutbox(dir string, opt FallbackOptions) (*FallbackOutbox, error) {
	if dir == "" {
		return nil, errors.New("link: outbox: state dir is empty")
	}
	if opt.RetryEvery <= 0 {
		opt.RetryEvery = DefaultStorageRetry
	}
	o := &FallbackOutbox{dir: dir, opt: opt, log: opt.Logger, stop: make(chan struct{}), done: make(chan struct{})}
	if o.log == nil {
		o.log = slog.Default()
	}
	f, err := OpenFileOutbox(dir, opt.FileOutboxOptions)
	switch {
	case errors.Is(err, ErrStateDirInUse):
		return nil, err
	case err != nil:
		o.toMemory(o.readOnly(), err)
		o.changed()
	default:
		o.file = f
	}
	go o.retry()
	return o, nil
}

// readOnly reads what it can of the outbox file of a state dir that
// cannot be written, so its messages are still sent.
func (o *FallbackOutbox) readOnly() []OutboxEntry {
	path := filepath.Join(o.dir, OutboxFile)
	data, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	pending, _, _, _, _ := loadOutbox(data, path, o.log)
	return pending.list()
}

// Problem says why the messages are kept in memory (nil: durable).
func (o *FallbackOutbox) Problem() error {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.problem
}

// Add implements Outbox: durable when it returns, unless Problem.
func (o *FallbackOutbox) Add(text string) (OutboxEntry, error) {
	return o.add(func(b Outbox) (OutboxEntry, error) { return b.Add(text) })
}

// AddAnswer implements Outbox, as Add does.
func (o *FallbackOutbox) AddAnswer(questionID, optionID string) (OutboxEntry, error) {
	return o.add(func(b Outbox) (OutboxEntry, error) { return b.AddAnswer(questionID, optionID) })
}

func (o *FallbackOutbox) add(add func(Outbox) (OutboxEntry, error)) (OutboxEntry, error) {
	o.mu.Lock()
	if o.closed {
		o.mu.Unlock()
		return OutboxEntry{}, ErrOutboxClosed
	}
	if o.file != nil {
		e, err := add(o.file)
		if err == nil || errors.Is(err, ErrOutboxClosed) {
			o.mu.Unlock()
			return e, err
		}
		o.leaveFile(err)
		defer o.changed()
	}
	defer o.mu.Unlock()
	return add(o.mem)
}

// Pending implements Outbox.
func (o *FallbackOutbox) Pending() []OutboxEntry {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.file != nil {
		return o.file.Pending()
	}
	return o.mem.Pending()
}

// Done implements Outbox.
func (o *FallbackOutbox) Done(id string) error {
	o.mu.Lock()
	if o.closed {
		o.mu.Unlock()
		return ErrOutboxClosed
	}
	if o.file != nil {
		err := o.file.Done(id)
		if err == nil || errors.Is(err, ErrOutboxClosed) {
			o.mu.Unlock()
			return err
		}
		o.leaveFile(err)
		defer o.changed()
	}
	defer o.mu.Unlock()
	return o.mem.Done(id)
}

// leaveFile leaves the file, which failed with err, for memory; o.mu is
// held.
func (o *FallbackOutbox) leaveFile(err error) {
	pending := o.file.Pending()
	_ = o.file.Close()
	o.file = nil
	o.toMemory(pending, err)
}

// toMemory keeps pending (the file's messages) in memory because of err.
func (o *FallbackOutbox) toMemory(pending []OutboxEntry, err error) {
	o.mem, o.fromFile, o.problem = newMemoryOutbox(pending), map[string]bool{}, err
	for _, e := range pending {
		o.fromFile[e.ID] = true
	}
	o.log.Error("outbox: the state dir cannot be written; keeping messages in memory until it can", "dir", o.dir, "err", err, "pending", len(pending))
}

// changed tells OnChange the current state.
func (o *FallbackOutbox) changed() {
	if o.opt.OnChange == nil {
		return
	}
	o.reportMu.Lock()
	defer o.reportMu.Unlock()
	o.opt.OnChange(o.Problem())
}

// retry tries the state dir every RetryEvery while in memory, until Close.
func (o *FallbackOutbox) retry() {
	defer close(o.done)
	t := time.NewTicker(o.opt.RetryEvery)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			if o.recover() {
				o.changed()
			}
		case <-o.stop:
			return
		}
	}
}

// recover opens the state dir again and moves the messages kept in memory
// into it; true when that changed the state (durable now, or a new
// reason).
func (o *FallbackOutbox) recover() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.closed || o.file != nil {
		return false
	}
	f, err := OpenFileOutbox(o.dir, o.opt.FileOutboxOptions)
	if err == nil {
		err = o.merge(f)
		if err != nil {
			_ = f.Close()
		}
	}
	if err != nil {
		same := o.problem != nil && o.problem.Error() == err.Error()
		o.problem = err
		return !same
	}
	o.log.Info("outbox: state dir works again; messages kept in memory are stored", "dir", o.dir)
	o.file, o.problem, o.mem, o.fromFile = f, nil, nil, nil
	return true
}

// merge makes f hold what memory holds: memory's new messages added with
// their ids, the file's messages answered meanwhile marked done.
func (o *FallbackOutbox) merge(f *FileOutbox) error {
	mem := o.mem.Pending()
	kept := map[string]bool{}
	for _, e := range mem {
		kept[e.ID] = true
	}
	for _, e := range f.Pending() {
		if !kept[e.ID] && o.fromFile[e.ID] {
			if err := f.Done(e.ID); err != nil {
				return err
			}
		}
	}
	if err := f.importEntries(mem); err != nil {
		return fmt.Errorf("link: outbox: %w", err)
	}
	return nil
}

// Close implements Outbox: it stops the retries and closes the file.
func (o *FallbackOutbox) Close() error {
	o.mu.Lock()
	if o.closed {
		o.mu.Unlock()
		<-o.done
		return nil
	}
	o.closed = true
	close(o.stop)
	var err error
	if o.file != nil {
		err = o.file.Close()
	}
	o.mu.Unlock()
	<-o.done
	return err
}
