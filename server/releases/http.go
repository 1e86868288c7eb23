package releases

import (
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"termlink/release"
	"termlink/server/httpapi"
	"termlink/server/throttle"
)

// ManifestHeader carries an upload's manifest: the base64 (standard, with
// padding) of the manifest file's bytes.
const ManifestHeader = "X-Release-Manifest"

// BinaryContentType is the Content-Type of an upload's body, the binary.
const BinaryContentType = "application/octet-stream"

// UploadPattern is the one route whose body is not JSON: the guard lets
// it through with BinaryContentType (RawBodyRoute) and the route bounds
// the body itself, by its manifest's size. A page of another origin
// cannot send that type (nor the manifest header) without a CORS
// preflight, which this server never grants.
const UploadPattern = "PUT /api/releases/{version}/{platform...}"

// RawBodyRoute reports whether a route's writes take a binary body (the
// guard's option).
func RawBodyRoute(pattern string) bool { return pattern == UploadPattern }

// Routes registers the release routes:
//
//	PUT    /api/releases/{version}/{os}/{arch}[/{variant}]            upload (operator)
//	GET    /api/releases[?version=V]                                  list
//	GET    /api/releases/events                                       uploads and deletes
//	GET    /api/releases/{version}/{os}/{arch}[/{variant}]/manifest   the manifest
//	GET    /api/releases/{version}/{os}/{arch}[/{variant}]/binary     the binary (Range)
//	DELETE /api/releases/{version}/{os}/{arch}[/{variant}]            delete (operator)
func (s *Store) Routes(mux httpapi.Mux) {
	httpapi.HandleClass(mux, UploadPattern, httpapi.RawBodyRoute, s.servePut)
	mux.HandleFunc("GET /api/releases", s.serveList)
	mux.HandleFunc("GET /api/releases/events", s.serveEvents)
	mux.HandleFunc("GET /api/releases/{version}/{rest...}", s.serveGet)
	mux.HandleFunc("DELETE /api/releases/{version}/{platform...}", s.serveDelete)
}

// ParsePath checks a release route's version and the rest of its path:
// the platform, then (want true: a GET) "/manifest" or "/binary". It
// returns the platform and that last part.
// What is wrong is said with at most MaxEcho bytes of what the client
// sent (a path may be kilobytes long; its answer and its log line are
// not).
func ParsePath(version, rest string, want bool) (platform, part string, err error) {
	if err := checkEcho(release.CheckVersion, version); err != nil {
		return "", "", err
	}
	platform = rest
	if want && patchPathRE.MatchString(rest) { // .../patches/{from_sha256}
		i := strings.LastIndex(rest, "/patches/")
		platform, part = rest[:i], rest[i+1:]
	} else if want {
		i := strings.LastIndexByte(rest, '/')
		if i < 0 || (rest[i+1:] != "manifest" && rest[i+1:] != "binary") {
			return "", "", fmt.Errorf("path %q: want {os}/{arch}[/{variant}]/manifest, .../binary or .../patches/{from_sha256}", throttle.Cut(rest, MaxEcho))
		}
		platform, part = rest[:i], rest[i+1:]
	}
	if err := checkEcho(release.CheckPlatform, platform); err != nil {
		return "", "", err
	}
	return platform, part, nil
}

// patchPathRE is the end of a patch's path.
var patchPathRE = regexp.MustCompile(`/patches/[0-9a-f]{64}$`)

// MaxEcho bounds the bytes of a path value an error repeats.
const MaxEcho = 80

// checkEcho is check(v), its error naming v cut to MaxEcho bytes: check
// is asked again about the cut value, which it refuses for the same
// reason (a version or platform is far shorter than MaxEcho, and a cut
// value ends with "…(N bytes)", a character neither takes), so the
// words stay release's and the echo stays short.
func checkEcho(check func(string) error, v string) error {
	err := check(v)
	if err == nil || len(v) <= MaxEcho {
		return err
	}
	if cut := check(throttle.Cut(v, MaxEcho)); cut != nil {
		return cut
	}
	return err
}

// DecodeManifestHeader decodes ManifestHeader's value into a checked
// manifest (not its signature).
func DecodeManifestHeader(v string) (*release.Manifest, error) {
	if v == "" {
		return nil, errors.New("no " + ManifestHeader + " header: an upload carries its manifest there (base64 of BINARY.release.json)")
	}
	if len(v) > base64.StdEncoding.EncodedLen(release.MaxManifestBytes) {
		return nil, fmt.Errorf("%s: longer than a manifest's %d bytes", ManifestHeader, release.MaxManifestBytes)
	}
	b, err := base64.StdEncoding.DecodeString(v)
	if err != nil {
		return nil, fmt.Errorf("%s: not base64: %v", ManifestHeader, err)
	}
	return release.ParseManifest(b)
}

// answer writes err: a refusal with its status, a full disk 507, anything
// else 500.
func answer(w http.ResponseWriter, err error) {
	var e *Error
	switch {
	case errors.As(err, &e):
		httpapi.WriteError(w, e.Status, e.Msg)
	case errors.Is(err, syscall.ENOSPC):
		httpapi.WriteError(w, http.StatusInsufficientStorage, "the server's disk is full: "+err.Error())
	default:
		httpapi.WriteError(w, http.StatusInternalServerError, err.Error())
	}
}

func (s *Store) servePut(w http.ResponseWriter, r *http.Request) {
	op := httpapi.OperatorOf(r).Name
	if err := s.put(w, r, op); err != nil {
		var e *Error
		if errors.As(err, &e) && e.Status != http.StatusNotFound {
			s.event(EventRefused, fmt.Sprintf("upload of %s %s by %s: %s", r.PathValue("version"), r.PathValue("platform"), op, e.Msg))
		}
		s.opt.Log.Warn("release upload refused", "path", r.URL.Path, "by", op, "err", err)
		// The client may still be sending: closing the connection says
		// "stop" without reading the rest of a refused binary.
		w.Header().Set("Connection", "close")
		answer(w, err)
	}
}

func (s *Store) put(w http.ResponseWriter, r *http.Request, op string) error {
	version := r.PathValue("version")
	platform, _, err := ParsePath(version, r.PathValue("platform"), false)
	if err != nil {
		return refuse(400, "%v", err)
	}
	if v := r.Header.Get(PatchManifestHeader); v != "" {
		return s.putPatch(w, r, op, version, platform, v)
	}
	m, err := DecodeManifestHeader(r.Header.Get(ManifestHeader))
	if err != nil {
		return refuse(400, "%v", err)
	}
	if m.Version != version || m.Platform != platform {
		return refuse(400, "the manifest is for %s %s, the path says %s %s", m.Version, m.Platform, version, platform)
	}
	if r.ContentLength >= 0 && r.ContentLength != m.Size {
		return refuse(422, "the body is %d bytes, the manifest says the binary is %d", r.ContentLength, m.Size)
	}
	body := &stallReader{r: r.Body, rc: http.NewResponseController(w), stall: s.opt.Stall}
	e, err := s.Put(r.Context(), m, body, op)
	if err != nil {
		return err
	}
	httpapi.WriteJSON(w, http.StatusCreated, e)
	return nil
}

func (s *Store) serveList(w http.ResponseWriter, r *http.Request) {
	v := r.URL.Query().Get("version")
	if v != "" {
		if err := release.CheckVersion(v); err != nil {
			httpapi.WriteError(w, http.StatusBadRequest, err.Error())
			return
		}
	}
	if err := s.Ready(); err != nil {
		answer(w, err)
		return
	}
	used, maxBytes, n, maxN := s.Usage()
	httpapi.WriteJSON(w, http.StatusOK, map[string]any{
		"releases": s.List(v), "patches": s.Patches(v, ""), "bytes": used, "max_bytes": maxBytes, "count": n, "max_releases": maxN,
		"signatures_checked": s.opt.PublicKey != nil,
	})
}

func (s *Store) serveEvents(w http.ResponseWriter, r *http.Request) {
	httpapi.WriteJSON(w, http.StatusOK, map[string]any{"events": s.events.Recent(256)})
}

// ServeGet serves the manifest or the binary (Range, If-Range) that the
// request's {version} and {rest...} path values name: the operator's
// route, and the devices' download route of the server's channels.
func (s *Store) ServeGet(w http.ResponseWriter, r *http.Request) { s.serveGet(w, r) }

func (s *Store) serveGet(w http.ResponseWriter, r *http.Request) {
	version := r.PathValue("version")
	platform, part, err := ParsePath(version, r.PathValue("rest"), true)
	if err != nil {
		httpapi.WriteError(w, http.StatusBadRequest, err.Error())
		return
	}
	if from, ok := strings.CutPrefix(part, "patches/"); ok {
		s.servePatch(w, r, version, platform, from)
		return
	}
	if part == "manifest" {
		m, ok := s.Manifest(version, platform)
		if !ok {
			answer(w, refuse(404, "no release %s for %s is stored", version, platform))
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(m.Marshal())
		return
	}
	f, e, err := s.OpenBinary(r.Context(), version, platform)
	if err != nil {
		answer(w, err)
		return
	}
	defer f.Close()
	w.Header().Set("Content-Type", BinaryContentType)
	w.Header().Set("ETag", `"`+e.SHA256+`"`) // If-Range: a resumed download is of the same binary
	w.Header().Set("X-Release-Sha256", e.SHA256)
	w.Header().Set("X-Release-Version", e.Version)
	w.Header().Set("X-Release-Platform", e.Platform)
	if rg, ok := satisfiableRanges(r.Header.Get("Range"), e.Size); ok {
		r.Header.Set("Range", rg)
	}
	sw := &stallWriter{ResponseWriter: w, rc: http.NewResponseController(w), stall: s.opt.Stall}
	http.ServeContent(sw, r, "", e.UploadedAt, f)
}

// satisfiableRanges is a Range header without its empty suffix ranges
// ("-0", or any "-N" of an empty file): RFC 9110 section 14.1.3 calls
// them unsatisfiable, and http.ServeContent would answer one with 206
// and an invalid Content-Range ("bytes SIZE-(SIZE-1)/SIZE"). ok is
// false when h is left as it is. When no range is left, the header
// becomes "bytes=SIZE-", which ServeContent answers with 416 and
// "Content-Range: bytes */SIZE" (and, as for any Range, with the whole
// binary when If-Range does not match).
func satisfiableRanges(h string, size int64) (string, bool) {
	specs, found := strings.CutPrefix(h, "bytes=")
	if !found {
		return h, false
	}
	var kept []string
	dropped := false
	for _, spec := range strings.Split(specs, ",") {
		t := strings.TrimSpace(spec)
		if n, isSuffix := strings.CutPrefix(t, "-"); isSuffix {
			if v, err := strconv.ParseInt(strings.TrimSpace(n), 10, 64); err == nil && v >= 0 && (v == 0 || size == 0) {
				dropped = true
				continue
			}
		}
		kept = append(kept, spec)
	}
	switch {
	case !dropped:
		return h, false
	case len(kept) == 0 || strings.TrimSpace(strings.Join(kept, "")) == "":
		return "bytes=" + strconv.FormatInt(size, 10) + "-", true
	}
	return "bytes=" + strings.Join(kept, ","), true
}

func (s *Store) serveDelete(w http.ResponseWriter, r *http.Request) {
	version := r.PathValue("version")
	platform, _, err := ParsePath(version, r.PathValue("platform"), false)
	if err != nil {
		httpapi.WriteError(w, http.StatusBadRequest, err.Error())
		return
	}
	if err := s.Delete(r.Context(), version, platform, httpapi.OperatorOf(r).Name); err != nil {
		answer(w, err)
		return
	}
	httpapi.WriteJSON(w, http.StatusOK, map[string]any{"deleted": map[string]string{"version": version, "platform": platform}})
}

// stallReader pushes the connection's read deadline stall ahead as the
// body comes in, so an upload may take as long as it keeps moving (the
// server's whole-request ReadTimeout would cut a large one on a slow
// link) and a stalled one ends.
type stallReader struct {
	r     interface{ Read([]byte) (int, error) }
	rc    *http.ResponseController
	stall time.Duration
	next  time.Time
}

func (s *stallReader) Read(p []byte) (int, error) {
	if now := time.Now(); now.After(s.next) {
		_ = s.rc.SetReadDeadline(now.Add(s.stall)) // unsupported (a test's recorder): the server's own timeout stays
		s.next = now.Add(s.stall / 8)
	}
	return s.r.Read(p)
}

// stallWriter does for a download's writes what stallReader does for an
// upload's reads.
type stallWriter struct {
	http.ResponseWriter
	rc    *http.ResponseController
	stall time.Duration
	next  time.Time
}

func (s *stallWriter) Write(p []byte) (int, error) {
	if now := time.Now(); now.After(s.next) {
		_ = s.rc.SetWriteDeadline(now.Add(s.stall))
		s.next = now.Add(s.stall / 8)
	}
	return s.ResponseWriter.Write(p)
}
