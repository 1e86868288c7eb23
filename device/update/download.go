package update

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"syscall"

	"termlink/release"
)

// download brings the binary m describes to part, continuing a partial
// file there with a Range request. It never writes more than m.Size
// bytes; a server that sends more is refused (and the part deleted). A
// download that stops early keeps what it got for the next call
// (ErrTruncated). It does not check the content: the caller does.
func download(ctx context.Context, client *http.Client, url, token, part string, m *release.Manifest) error {
	f, err := os.OpenFile(part, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return diskErr("opening "+part, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	have := fi.Size()
	if have > m.Size { // another file: start over
		if err := f.Truncate(0); err != nil {
			return diskErr("truncating "+part, err)
		}
		have = 0
	}
	if have == m.Size {
		return nil
	}
	if err := checkSpace(part, m.Size-have); err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return fmt.Errorf("release URL %q: %w", url, err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if have > 0 {
		req.Header.Set("Range", "bytes="+strconv.FormatInt(have, 10)+"-")
	}
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("downloading the release: %w", err)
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK:
		if have > 0 { // the server ignored the range: from the start
			if err := f.Truncate(0); err != nil {
				return diskErr("truncating "+part, err)
			}
			have = 0
		}
	case http.StatusPartialContent:
		start, total, err := contentRange(resp.Header.Get("Content-Range"))
		if err != nil {
			return fmt.Errorf("downloading the release: %w", err)
		}
		if start != have {
			return fmt.Errorf("downloading the release: the server resumed at byte %d, asked for %d", start, have)
		}
		if total >= 0 && total != m.Size {
			return fmt.Errorf("%w: the server's file is %d bytes, the manifest says %d", ErrTooLarge, total, m.Size)
		}
	case http.StatusRequestedRangeNotSatisfiable:
		// The part is not a prefix of the server's file: start over.
		_ = f.Truncate(0)
		return fmt.Errorf("downloading the release: the server refused to resume at byte %d (%s); the next try starts over", have, resp.Status)
	default:
		return fmt.Errorf("downloading the release: %s", resp.Status)
	}
	want := m.Size - have
	if resp.ContentLength > want {
		return fmt.Errorf("%w: the server sends %d bytes, %d are missing", ErrTooLarge, resp.ContentLength, want)
	}
	if _, err := f.Seek(have, io.SeekStart); err != nil {
		return err
	}
	n, err := io.Copy(f, io.LimitReader(resp.Body, want))
	if err != nil {
		var pe *os.PathError
		if errors.As(err, &pe) { // the write failed, not the read
			return diskErr("writing "+part, err)
		}
	}
	if serr := f.Sync(); serr != nil {
		return diskErr("fsync of "+part, serr)
	}
	if n < want {
		why := "the connection ended"
		if err != nil {
			why = err.Error()
		}
		return fmt.Errorf("%w: %d of %d bytes (%s); the next try resumes", ErrTruncated, have+n, m.Size, why)
	}
	var one [1]byte
	if k, _ := resp.Body.Read(one[:]); k > 0 {
		f.Close()
		os.Remove(part)
		return fmt.Errorf("%w: the server sent more than the manifest's %d bytes", ErrTooLarge, m.Size)
	}
	return nil
}

// contentRange parses "bytes START-END/TOTAL" (TOTAL may be "*": -1).
func contentRange(h string) (start, total int64, err error) {
	rest, ok := strings.CutPrefix(h, "bytes ")
	r, t, ok2 := strings.Cut(rest, "/")
	s, _, ok3 := strings.Cut(r, "-")
	if !ok || !ok2 || !ok3 {
		return 0, 0, fmt.Errorf("bad Content-Range %q", h)
	}
	if start, err = strconv.ParseInt(s, 10, 64); err != nil || start < 0 {
		return 0, 0, fmt.Errorf("bad Content-Range %q", h)
	}
	if t == "*" {
		return start, -1, nil
	}
	if total, err = strconv.ParseInt(t, 10, 64); err != nil {
		return 0, 0, fmt.Errorf("bad Content-Range %q", h)
	}
	return start, total, nil
}

// diskErr wraps a file system error, as ErrDiskFull when it is ENOSPC
// (or EDQUOT).
func diskErr(what string, err error) error {
	if errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) {
		return fmt.Errorf("%w: %s: %v", ErrDiskFull, what, err)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// checkSpace refuses a download the file system of path has no room for.
func checkSpace(path string, need int64) error {
	var st syscall.Statfs_t
	dir := path[:max(strings.LastIndexByte(path, '/'), 0)]
	if dir == "" {
		dir = "."
	}
	if err := syscall.Statfs(dir, &st); err != nil {
		return nil // unknown: the writes will say
	}
	if free := int64(st.Bavail) * int64(st.Bsize); free < need {
		return fmt.Errorf("%w: %d bytes to download, %d free in %s", ErrDiskFull, need, free, dir)
	}
	return nil
}
