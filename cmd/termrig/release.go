package main

import (
	"bytes"
	"cmp"
	"context"
	"debug/buildinfo"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"termlink/link/enroll"
	"termlink/release"
	"termlink/server/rollout"
)

// The release commands (issue 28): the operator's side of signed termd
// releases. keygen and sign run on the operator's machine, where
// release.key stays; upload, list and delete talk to termserver's release
// store (package server/releases) through its operator API.

const releaseSynopsis = `<keygen|sign|delta|verify|upload|list|delete> [flags] [args]

  keygen --out DIR
      writes DIR/release.key (0600; it never leaves this machine) and DIR/release.pub
  sign --key DIR/release.key --version V --platform OS/ARCH[/VARIANT] BINARY
      writes BINARY.release.json: version, platform, size, sha256, signature
  delta --from OLD_BINARY --to NEW_BINARY --key DIR/release.key [--out PATCH]
      writes a signed patch that makes NEW_BINARY (signed already) of OLD_BINARY:
      PATCH (default NEW_BINARY.from-SHA.patch) and PATCH.json; upload it after NEW_BINARY
  verify --pub release.pub BINARY [MANIFEST]
      checks the manifest's signature and the binary against it
  upload --server URL [--admin-token-file F] BINARY|PATCH [MANIFEST]
      stores the release (or a patch beside it) on termserver (PUT /api/releases/V/OS/ARCH[/VARIANT])
  list --server URL [--admin-token-file F] [--version V]
  delete --server URL [--admin-token-file F] --version V --platform P
  rollout --server URL --version V (--peers a,b | --tag k=v | --all) [--canary N] [--percent P]
          [--allow-downgrade] [--gate-seconds S] [--window HH:MM-HH:MM [--zone utc|device]] [--force]
          [--channel ID] [--admin-token-file F]
      starts a staged rollout of V to the channel's devices (POST /api/channels/ID/rollouts);
      a device in use waits (waiting: in use), and nothing is sent outside --window (waiting: window)
  status --server URL [--version V] [--channel ID] [--watch] [--admin-token-file F]
      each device of the newest rollout (of V): state, version, reason
  pause|resume|abort --server URL [--channel ID] [--retry] ROLLOUT_ID

MANIFEST defaults to BINARY.release.json. Without --channel, rollout,
status, pause, resume and abort act on the server's only channel, or on
the one that holds the devices (--peers, --tag) or the rollout named; a
server with several channels otherwise refuses them (exit 2), naming its
channels. A rollout that updates no device (each one skipped) exits 1.
Run 'termrig release <command> -h' for the flags of one.`

// releaseSummaries are the release commands, as termrig --help lists
// them (a test checks they are releaseCommands').
var releaseSummaries = []subSummary{
	{"keygen", "write a release key pair (release.key stays on this machine)"},
	{"sign", "sign a termd binary: BINARY.release.json"},
	{"delta", "make a signed patch from an older binary to a signed release"},
	{"verify", "check a binary against its manifest and the public key"},
	{"upload", "store a signed release on termserver"},
	{"list", "the releases termserver stores"},
	{"delete", "delete a stored release"},
	{"rollout", "start a staged rollout of a release to a channel's devices"},
	{"status", "the newest rollout's devices: state, version, reason (--watch)"},
	{"pause", "pause a running rollout"},
	{"resume", "resume a paused rollout (--retry: the failed devices again)"},
	{"abort", "end a rollout"},
}

// releaseCommands are the release commands by name.
func (a *app) releaseCommands() map[string]func(context.Context, []string) error {
	return map[string]func(context.Context, []string) error{
		"keygen": a.releaseKeygen, "sign": a.releaseSign, "delta": a.releaseDelta, "verify": a.releaseVerify,
		"upload": a.releaseUpload, "list": a.releaseList, "delete": a.releaseDelete,
		"rollout": a.releaseRollout, "status": a.releaseStatus,
		"pause": a.rolloutAction("pause"), "resume": a.rolloutAction("resume"), "abort": a.rolloutAction("abort"),
	}
}

func (a *app) release(ctx context.Context, args []string) error {
	cmds := a.releaseCommands()
	if len(args) == 0 {
		return usagef("which release command? keygen, sign, delta, verify, upload, list, delete, rollout, status, pause, resume or abort")
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		fmt.Fprintf(a.stdout, "Usage: termrig release %s\n", releaseSynopsis)
		return flag.ErrHelp
	}
	cmd, ok := cmds[args[0]]
	if !ok {
		return usagef("unknown release command %q: keygen, sign, delta, verify, upload, list, delete, rollout, status, pause, resume or abort", args[0])
	}
	return cmd(ctx, args[1:])
}

// parseArgs parses flags and positional arguments in any order (an
// operator types "upload termd --server URL" as often as the reverse) and
// checks the number of positional ones.
func parseArgs(fs *flag.FlagSet, usage func(), args []string, min, max int, names string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				usage()
				return nil, err
			}
			return nil, usageError{err}
		}
		args = fs.Args()
		if len(args) == 0 {
			break
		}
		if args[0] == "--" {
			pos = append(pos, args[1:]...)
			break
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
	switch {
	case len(pos) < min:
		return nil, usagef("missing %s", names)
	case len(pos) > max:
		return nil, usagef("unexpected argument %q (arguments: %s)", pos[max], names)
	}
	return pos, nil
}

func (a *app) releaseKeygen(_ context.Context, args []string) error {
	fs, usage := a.newFlagSet("release keygen", "--out DIR\n\nWrites a new release key pair into DIR (made 0700 when new).")
	out := fs.String("out", "", "`directory` for release.key and release.pub (required)")
	if _, err := parseArgs(fs, usage, args, 0, 0, "nothing"); err != nil {
		return err
	}
	if *out == "" {
		return usagef("--out is required (the directory for release.key and release.pub)")
	}
	if _, err := release.GenerateKey(*out); err != nil {
		return err
	}
	key, pub := filepath.Join(*out, release.PrivateKeyFile), filepath.Join(*out, release.PublicKeyFile)
	fmt.Fprintf(a.stdout, "wrote %s (private, mode 0600): it signs releases and stays on this machine; keep a copy offline\n", key)
	fmt.Fprintf(a.stdout, "wrote %s (public): termserver's releases.publicKeyFile, and the key each termd pins\n", pub)
	return nil
}

func (a *app) releaseSign(_ context.Context, args []string) error {
	fs, usage := a.newFlagSet("release sign", `--key DIR/release.key --version V --platform OS/ARCH[/VARIANT] BINARY

Writes BINARY.release.json. A Go binary's build (GOOS, GOARCH, GOARM and a
-X main.version stamp) must agree with --platform and --version.`)
	keyFile := fs.String("key", "", "the private `key` file (termrig release keygen's release.key; required)")
	ver := fs.String("version", "", "the release's `version` (required), as stamped with -ldflags \"-X main.version=V\"")
	plat := fs.String("platform", "", "`os/arch[/variant]` the binary is built for (required): linux/arm/6, linux/arm64, linux/amd64")
	pos, err := parseArgs(fs, usage, args, 1, 1, "BINARY")
	if err != nil {
		return err
	}
	switch {
	case *keyFile == "":
		return usagef("--key is required (release.key from termrig release keygen)")
	case *ver == "":
		return usagef("--version is required")
	case *plat == "":
		return usagef("--platform is required (e.g. linux/arm/6 for a Raspberry Pi Zero; this machine is %s)", release.CurrentPlatform())
	}
	if err := errors.Join(release.CheckVersion(*ver), release.CheckPlatform(*plat)); err != nil {
		return usageError{err}
	}
	bin := pos[0]
	unchecked, err := checkBuild(bin, *ver, *plat)
	if err != nil {
		return err
	}
	if unchecked != "" {
		fmt.Fprintf(a.stderr, "note: %s\n", unchecked)
	}
	priv, err := release.LoadPrivateKey(*keyFile)
	if err != nil {
		return err
	}
	m, err := release.Sign(priv, *ver, *plat, bin)
	if err != nil {
		return err
	}
	out := bin + release.ManifestSuffix
	tmp := out + ".tmp"
	if err := os.WriteFile(tmp, m.Marshal(), 0o644); err != nil {
		return err
	}
	if err := os.Rename(tmp, out); err != nil {
		os.Remove(tmp)
		return err
	}
	fmt.Fprintf(a.stdout, "signed %s: version %s for %s, %d bytes, sha256 %s\nwrote %s\n", bin, m.Version, m.Platform, m.Size, m.SHA256, out)
	return nil
}

var versionStampRE = regexp.MustCompile(`-X[ =]'?main\.version=([^ ']+)`)

// checkBuild says what in a Go binary's build disagrees with the version
// and platform it is about to be signed as. A file that is not a Go
// binary is not checked. unchecked says what could not be checked: a
// build with -trimpath (make pi's) keeps -ldflags out of its build info
// (go.dev/issue/52372), so its -X main.version stamp cannot be read.
func checkBuild(path, version, platform string) (unchecked string, err error) {
	if _, err := os.Stat(path); err != nil {
		return "", err
	}
	bi, err := buildinfo.ReadFile(path)
	if err != nil {
		return "", nil // not a Go binary (or stripped of its build info): the manifest says what the operator says
	}
	set := map[string]string{}
	for _, s := range bi.Settings {
		set[s.Key] = s.Value
	}
	built := set["GOOS"] + "/" + set["GOARCH"]
	if set["GOARCH"] == "arm" {
		v, _, _ := strings.Cut(set["GOARM"], ",")
		if v == "" {
			v = "7"
		}
		built += "/" + v
	}
	if set["GOOS"] != "" && built != platform {
		return "", fmt.Errorf("%s is built for %s, not %s: sign it with --platform %s, or build it for %s", path, built, platform, built, platform)
	}
	if m := versionStampRE.FindStringSubmatch(set["-ldflags"]); m != nil && m[1] != version {
		return "", fmt.Errorf("%s is stamped version %s (-X main.version), not %s: a device reports the stamp, so sign it as %s", path, m[1], version, m[1])
	}
	if set["-trimpath"] == "true" && set["-ldflags"] == "" {
		return fmt.Sprintf("%s was built with -trimpath, whose build info leaves -ldflags out: its version stamp was not checked against --version %s (a device reports the stamp as the version it runs: check it with termd --version on the device's architecture)", path, version), nil
	}
	return "", nil
}

// readManifest reads and parses a manifest file.
func readManifest(path string) (*release.Manifest, []byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, nil, fmt.Errorf("%s: no manifest (termrig release sign writes it beside the binary)", path)
		}
		return nil, nil, err
	}
	if len(b) > release.MaxManifestBytes {
		return nil, nil, fmt.Errorf("%s: %d bytes, more than a manifest's %d", path, len(b), release.MaxManifestBytes)
	}
	m, err := release.ParseManifest(b)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", path, err)
	}
	return m, b, nil
}

// checkLocal checks binary against its manifest (size and sha256).
func checkLocal(bin string, m *release.Manifest, manifestPath string) error {
	f, err := os.Open(bin)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := m.CheckBinary(f); err != nil {
		return fmt.Errorf("%s does not match %s: %w", bin, manifestPath, err)
	}
	return nil
}

func (a *app) releaseVerify(_ context.Context, args []string) error {
	fs, usage := a.newFlagSet("release verify", "--pub release.pub BINARY [MANIFEST]\n\nChecks the manifest's signature against the public key, and the binary against the manifest, as a device does.")
	pubFile := fs.String("pub", "", "the public `key` file (release.pub; required)")
	pos, err := parseArgs(fs, usage, args, 1, 2, "BINARY [MANIFEST]")
	if err != nil {
		return err
	}
	if *pubFile == "" {
		return usagef("--pub is required (release.pub from termrig release keygen)")
	}
	pub, err := release.LoadPublicKey(*pubFile)
	if err != nil {
		return err
	}
	bin, mpath := pos[0], pos[0]+release.ManifestSuffix
	if len(pos) == 2 {
		mpath = pos[1]
	}
	m, _, err := readManifest(mpath)
	if err != nil {
		return err
	}
	if err := m.Verify(pub); err != nil {
		return fmt.Errorf("%s: %w (%s)", mpath, err, *pubFile)
	}
	if err := checkLocal(bin, m, mpath); err != nil {
		return err
	}
	fmt.Fprintf(a.stdout, "OK %s: version %s for %s, %d bytes, sha256 %s, signed by the key in %s\n", bin, m.Version, m.Platform, m.Size, m.SHA256, *pubFile)
	return nil
}

// apiClient talks to termserver's operator API.
type apiClient struct {
	base, token string
	hc          *http.Client
}

func (a *app) serverFlags(fs *flag.FlagSet) (server, tokenFile *string) {
	server = fs.String("server", "", "termserver's `URL` (required), e.g. http://127.0.0.1:8080")
	tokenFile = fs.String("admin-token-file", "", "`file` holding an admin token (operator role to upload or delete); none: a loopback server without tokens")
	return
}

func newAPIClient(server, tokenFile string) (*apiClient, error) {
	if server == "" {
		return nil, usagef("--server is required (e.g. --server http://127.0.0.1:8080)")
	}
	u, err := url.Parse(server)
	if err != nil || u.Host == "" {
		return nil, usagef("--server %q: want http://HOST:PORT or https://HOST:PORT", server)
	}
	switch u.Scheme {
	case "http", "https":
	case "ws":
		u.Scheme = "http"
	case "wss":
		u.Scheme = "https"
	default:
		return nil, usagef("--server %q: want http://HOST:PORT or https://HOST:PORT", server)
	}
	c := &apiClient{base: u.Scheme + "://" + u.Host, hc: &http.Client{}}
	if tokenFile != "" {
		if c.token, err = enroll.ReadTokenFile(tokenFile); err != nil {
			return nil, fmt.Errorf("--admin-token-file: %w", err)
		}
	}
	return c, nil
}

// do sends a request and returns the body of a 2xx answer, or an error
// naming the status, the server's reason and what to do about a token.
func (c *apiClient) do(req *http.Request, what string) ([]byte, error) {
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return nil, fmt.Errorf("%s: reading the answer: %w", what, err)
	}
	if resp.StatusCode/100 == 2 {
		return b, nil
	}
	msg := fmt.Sprintf("%s: HTTP %d %s", what, resp.StatusCode, apiError(b))
	switch {
	case resp.StatusCode == http.StatusUnauthorized && c.token == "":
		msg += " (no admin token was given, and this server needs one: pass --admin-token-file FILE with a viewer's token to read, an operator's to change)"
	case resp.StatusCode == http.StatusUnauthorized:
		msg += " (the server did not accept the token in --admin-token-file)"
	case resp.StatusCode == http.StatusForbidden && c.token != "" && strings.Contains(msg, "role"):
		msg += " (the token in --admin-token-file needs the operator role)"
	case resp.StatusCode == http.StatusNotFound && strings.Contains(string(b), "404 page not found"):
		msg += " (this server has no release store: an older termserver?)"
	}
	return nil, &httpError{status: resp.StatusCode, msg: msg}
}

// httpError is an answer other than 2xx, as the operator reads it.
type httpError struct {
	status int
	msg    string
}

func (e *httpError) Error() string { return e.msg }

func (a *app) releaseUpload(ctx context.Context, args []string) error {
	fs, usage := a.newFlagSet("release upload", "--server URL [--admin-token-file F] BINARY [MANIFEST]\n\nStores a signed release on termserver. The binary is checked against its manifest here first.")
	server, tokenFile := a.serverFlags(fs)
	timeout := 30 * time.Minute
	fs.Var(durationFlag{&timeout}, "timeout", "limit `D` for the upload")
	pos, err := parseArgs(fs, usage, args, 1, 2, "BINARY [MANIFEST]")
	if err != nil {
		return err
	}
	c, err := newAPIClient(*server, *tokenFile)
	if err != nil {
		return err
	}
	bin, mpath := pos[0], pos[0]+release.ManifestSuffix
	if len(pos) == 2 {
		mpath = pos[1]
	}
	if pm, raw, ppath, err := patchManifestOf(bin, pos[1:]); err != nil {
		return err
	} else if pm != nil {
		return a.uploadPatch(ctx, c, bin, pm, raw, ppath, timeout)
	}
	m, raw, err := readManifest(mpath)
	if err != nil {
		return err
	}
	if err := checkLocal(bin, m, mpath); err != nil {
		return err
	}
	f, err := os.Open(bin)
	if err != nil {
		return err
	}
	defer f.Close()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, c.base+"/api/releases/"+m.Version+"/"+m.Platform, f)
	if err != nil {
		return err
	}
	req.ContentLength = m.Size
	req.Header.Set("Content-Type", "application/octet-stream")
	req.Header.Set("X-Release-Manifest", base64.StdEncoding.EncodeToString(raw))
	b, err := c.do(req, "uploading "+m.Version+" for "+m.Platform)
	if err != nil {
		return err
	}
	var e struct {
		SignatureChecked bool `json:"signature_checked"`
	}
	_ = json.Unmarshal(b, &e)
	checked := "the server has no release key: devices check the signature"
	if e.SignatureChecked {
		checked = "signature checked by the server"
	}
	fmt.Fprintf(a.stdout, "stored %s for %s on %s: %d bytes, sha256 %s (%s)\n", m.Version, m.Platform, c.base, m.Size, m.SHA256, checked)
	return nil
}

func (a *app) releaseList(ctx context.Context, args []string) error {
	fs, usage := a.newFlagSet("release list", "--server URL [--admin-token-file F] [--version V]\n\nLists the releases stored on termserver.")
	server, tokenFile := a.serverFlags(fs)
	ver := fs.String("version", "", "only `version` V")
	if _, err := parseArgs(fs, usage, args, 0, 0, "nothing"); err != nil {
		return err
	}
	c, err := newAPIClient(*server, *tokenFile)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	u := c.base + "/api/releases"
	if *ver != "" {
		u += "?version=" + url.QueryEscape(*ver)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	b, err := c.do(req, "listing releases")
	if err != nil {
		return err
	}
	var l struct {
		Releases []struct {
			Version, Platform, SHA256 string
			Size                      int64
			UploadedAt                time.Time `json:"uploaded_at"`
			UploadedBy                string    `json:"uploaded_by"`
		}
		Patches []struct {
			Version, Platform, SHA256 string
			Size                      int64
			FromSHA256                string `json:"from_sha256"`
			FromVersion               string `json:"from_version"`
		}
		Bytes       int64 `json:"bytes"`
		MaxBytes    int64 `json:"max_bytes"`
		Count       int   `json:"count"`
		MaxReleases int   `json:"max_releases"`
	}
	if err := json.Unmarshal(b, &l); err != nil {
		return fmt.Errorf("listing releases: the answer is not the list expected: %v", err)
	}
	tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "VERSION\tPLATFORM\tSIZE\tSHA256\tUPLOADED\tBY")
	for _, r := range l.Releases {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\n", r.Version, r.Platform, r.Size, r.SHA256[:min(16, len(r.SHA256))], r.UploadedAt.UTC().Format(time.RFC3339), r.UploadedBy)
	}
	for _, p := range l.Patches {
		from := p.FromSHA256[:min(16, len(p.FromSHA256))]
		if p.FromVersion != "" {
			from = p.FromVersion + " " + from
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\tpatch from %s\t\t\n", p.Version, p.Platform, p.Size, from)
	}
	_ = tw.Flush()
	fmt.Fprintf(a.stdout, "%d of %d releases, %d of %d bytes\n", l.Count, l.MaxReleases, l.Bytes, l.MaxBytes)
	return nil
}

func (a *app) releaseDelete(ctx context.Context, args []string) error {
	fs, usage := a.newFlagSet("release delete", "--server URL [--admin-token-file F] --version V --platform P\n\nDeletes a release from termserver.")
	server, tokenFile := a.serverFlags(fs)
	ver := fs.String("version", "", "the release's `version` (required)")
	plat := fs.String("platform", "", "its `platform` (required)")
	if _, err := parseArgs(fs, usage, args, 0, 0, "nothing"); err != nil {
		return err
	}
	if *ver == "" || *plat == "" {
		return usagef("--version and --platform are required")
	}
	if err := errors.Join(release.CheckVersion(*ver), release.CheckPlatform(*plat)); err != nil {
		return usageError{err}
	}
	c, err := newAPIClient(*server, *tokenFile)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodDelete, c.base+"/api/releases/"+*ver+"/"+*plat, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json") // the API's writes say JSON
	if _, err := c.do(req, "deleting "+*ver+" for "+*plat); err != nil {
		return err
	}
	fmt.Fprintf(a.stdout, "deleted %s for %s from %s\n", *ver, *plat, c.base)
	return nil
}

// The rollout commands: staged rollouts of a stored release to a
// channel's devices (package server/rollout, its operator API).

// rolloutsURL is the channel's rollouts route.
func (c *apiClient) rolloutsURL(channel string) string {
	return c.base + "/api/channels/" + url.PathEscape(channel) + "/rollouts"
}

// getJSON GETs u into v.
func (c *apiClient) getJSON(ctx context.Context, u, what string, v any) error {
	return c.doJSON(ctx, http.MethodGet, u, what, nil, v)
}

// postJSON POSTs body (JSON) to u and decodes the answer into v.
func (c *apiClient) postJSON(ctx context.Context, u, what string, body, v any) error {
	return c.doJSON(ctx, http.MethodPost, u, what, body, v)
}

// doJSON sends body (JSON; nil: none) and decodes the answer into v.
func (c *apiClient) doJSON(ctx context.Context, method, u, what string, body, v any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	out, err := c.do(req, what)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(out, v); err != nil {
		return fmt.Errorf("%s: the answer is not what was expected: %v", what, err)
	}
	return nil
}

func (a *app) releaseRollout(ctx context.Context, args []string) error {
	fs, usage := a.newFlagSet("release rollout", "--server URL --version V (--peers a,b | --tag k=v | --all) [--canary N] [--percent P] [--allow-downgrade] [--gate-seconds S] [--window HH:MM-HH:MM [--zone utc|device]] [--force] [--channel ID] [--admin-token-file F]\n\n"+
		"Starts a staged rollout of release V (uploaded already) to the channel's devices: the canaries first, the rest\n"+
		"in waves of P% once every canary is installed; it pauses by itself when a device fails, naming it. A device\n"+
		"a person is using waits until it is idle (waiting: in use); with --window nothing is sent outside it\n"+
		"(waiting: window); --force sends regardless of both.")
	server, tokenFile := a.serverFlags(fs)
	channel := channelFlag(fs, "the devices' channel")
	var q rollout.Request
	peers := fs.String("peers", "", "the devices, `a,b,...` (peer ids)")
	fs.StringVar(&q.Version, "version", "", "the release's `version` (required)")
	fs.StringVar(&q.Tag, "tag", "", "the devices tagged `key=value`")
	fs.BoolVar(&q.All, "all", false, "every device of the channel")
	fs.IntVar(&q.Canary, "canary", 0, "`N` devices updated first; the rest wait until every one is installed")
	fs.IntVar(&q.Percent, "percent", 100, "after the canaries, waves of `P` percent of the devices")
	fs.BoolVar(&q.AllowDowngrade, "allow-downgrade", false, "let devices on a newer version install V")
	fs.IntVar(&q.GateSeconds, "gate-seconds", 0, "the devices' health gate in `seconds` (0: each device's own)")
	fs.StringVar(&q.Window, "window", "", "the maintenance window `HH:MM-HH:MM` (24-hour; 22:00-04:00 spans midnight): nothing is sent outside it")
	fs.StringVar(&q.Zone, "zone", "", "the window's `zone`: utc (the default) or device (each device's own, else UTC)")
	fs.BoolVar(&q.Force, "force", false, "send regardless of the window and of devices in use")
	if _, err := parseArgs(fs, usage, args, 0, 0, "nothing"); err != nil {
		return err
	}
	if q.Version == "" {
		return usagef("--version is required")
	}
	if *peers != "" {
		q.Peers = strings.Split(*peers, ",")
	}
	if len(q.Peers) == 0 && q.Tag == "" && !q.All {
		return usagef("which devices? --peers a,b, --tag key=value or --all")
	}
	if q.Zone != "" && q.Window == "" {
		return usagef("--zone is for a --window")
	}
	c, err := newAPIClient(*server, *tokenFile)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	ch, err := a.channelFor(ctx, c, *channel, selection{peers: q.Peers, tag: q.Tag})
	if err != nil {
		return err
	}
	r, err := postRollout(ctx, c, ch, "", "starting the rollout of "+q.Version, q)
	if err != nil {
		return err
	}
	fmt.Fprintf(a.stdout, "rollout %s of %s to %s on %s: %d devices, %d waves after the canaries\n", r.ID, r.Version, r.Target, ch, len(r.Devices), r.Waves-1)
	a.printRollout(r)
	if why := updatesNone(r); why != "" {
		fmt.Fprintf(a.stderr, "termrig release rollout: rollout %s on %s updates no device: %s\n", r.ID, ch, why)
		return exitFailed
	}
	return nil
}

// updatesNone says why a rollout just started will update no device,
// or "" when a device is to take the release or runs it already: every
// device it selected was skipped or refused.
func updatesNone(r *rollout.Rollout) string {
	if len(r.Devices) == 0 {
		return "it selected no device"
	}
	reasons := map[string]int{}
	for _, d := range r.Devices {
		if d.State != rollout.Skipped && d.State != rollout.Refused {
			return ""
		}
		reasons[d.State+" ("+d.Reason+")"]++
	}
	var parts []string
	for _, why := range slices.Sorted(maps.Keys(reasons)) {
		parts = append(parts, fmt.Sprintf("%d %s", reasons[why], why))
	}
	return strings.Join(parts, "; ")
}

// postRollout POSTs body to the channel's rollouts route (+ suffix) and
// returns the rollout the server answers with.
func postRollout(ctx context.Context, c *apiClient, channel, suffix, what string, body any) (*rollout.Rollout, error) {
	var r rollout.Rollout
	if err := c.postJSON(ctx, c.rolloutsURL(channel)+suffix, what, body, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

// printRollout prints a rollout's state and its devices' table.
func (a *app) printRollout(r *rollout.Rollout) {
	fmt.Fprintf(a.stdout, "%s %s: %s", r.ID, r.Version, r.State)
	if r.Window != "" {
		fmt.Fprintf(a.stdout, " (window %s %s)", r.Window, cmp.Or(r.Zone, rollout.ZoneUTC))
	}
	if r.Force {
		fmt.Fprint(a.stdout, " (forced)")
	}
	if r.Paused != nil {
		if r.Paused.PeerID != "" {
			fmt.Fprintf(a.stdout, " (%s %s: %s)", r.Paused.PeerID, r.Paused.State, r.Paused.Reason)
		} else {
			fmt.Fprintf(a.stdout, " (%s)", r.Paused.Reason)
		}
	}
	states := make([]string, 0, len(r.Counts))
	for _, st := range []string{rollout.Installed, rollout.Pending, rollout.Sent, rollout.Downloading, rollout.Restarting,
		rollout.Waiting, rollout.Offline, rollout.Failed, rollout.RolledBack, rollout.Refused, rollout.Skipped} {
		if n := r.Counts[st]; n > 0 {
			states = append(states, fmt.Sprintf("%d %s", n, st))
		}
	}
	fmt.Fprintf(a.stdout, "; wave %d of %d; %s\n", max(r.Wave, 0), r.Waves-1, strings.Join(states, ", "))
	tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "DEVICE\tSTATE\tVERSION\tWAVE\tSINCE\tREASON")
	for _, d := range r.Devices {
		wave := "-"
		switch {
		case d.Wave == 0:
			wave = "canary"
		case d.Wave > 0:
			wave = fmt.Sprint(d.Wave)
		}
		st, why := d.State, d.Reason
		if st == rollout.Waiting {
			st, why = st+": "+why, "" // waiting: in use, waiting: window
		}
		if why == "" && st == d.State {
			why = d.Delivery // how a patch went (issue 43)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", d.PeerID, st, d.Running, wave, d.Since.UTC().Format(time.TimeOnly), why)
	}
	_ = tw.Flush()
}

func (a *app) releaseStatus(ctx context.Context, args []string) error {
	fs, usage := a.newFlagSet("release status", "--server URL [--version V] [--channel ID] [--watch] [--admin-token-file F]\n\n"+
		"Shows each device of the channel's newest rollout (of version V): its state, the version it runs, why it failed.")
	server, tokenFile := a.serverFlags(fs)
	channel := channelFlag(fs, "the devices' channel")
	ver := fs.String("version", "", "the newest rollout of `version` V")
	watch := fs.Bool("watch", false, "show it again every --every until it is no longer running")
	every := 2 * time.Second
	fs.Var(durationFlag{&every}, "every", "with --watch, how often (`D`)")
	if _, err := parseArgs(fs, usage, args, 0, 0, "nothing"); err != nil {
		return err
	}
	if *ver != "" {
		if err := release.CheckVersion(*ver); err != nil {
			return usageError{err}
		}
	}
	c, err := newAPIClient(*server, *tokenFile)
	if err != nil {
		return err
	}
	cctx, cancel := context.WithTimeout(ctx, time.Minute)
	ch, err := a.channelFor(cctx, c, *channel, selection{})
	cancel()
	if err != nil {
		return err
	}
	for {
		cctx, cancel := context.WithTimeout(ctx, time.Minute)
		r, err := c.newestRollout(cctx, ch, *ver)
		cancel()
		if err != nil {
			return err
		}
		a.printRollout(r)
		if !*watch || r.State != rollout.Running {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(every):
		}
		fmt.Fprintln(a.stdout)
	}
}

// newestRollout is the channel's newest rollout (of version, if not "").
func (c *apiClient) newestRollout(ctx context.Context, channel, version string) (*rollout.Rollout, error) {
	u := c.rolloutsURL(channel)
	if version != "" {
		u += "?version=" + url.QueryEscape(version)
	}
	var l struct{ Rollouts []rollout.Rollout }
	if err := c.getJSON(ctx, u, "listing rollouts", &l); err != nil {
		return nil, err
	}
	if len(l.Rollouts) == 0 {
		what := "no rollout on channel " + channel
		if version != "" {
			what += " of " + version
		}
		return nil, errors.New(what)
	}
	var r rollout.Rollout
	if err := c.getJSON(ctx, c.rolloutsURL(channel)+"/"+l.Rollouts[0].ID, "reading rollout "+l.Rollouts[0].ID, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

// rolloutAction is the command of an operator action on one rollout.
func (a *app) rolloutAction(action string) func(context.Context, []string) error {
	return func(ctx context.Context, args []string) error {
		fs, usage := a.newFlagSet("release "+action, "--server URL [--channel ID] [--admin-token-file F] ROLLOUT_ID\n\n"+map[string]string{
			"pause":  "Pauses a running rollout: nothing new is sent.",
			"resume": "Resumes a paused rollout; with --retry the devices that failed are sent the release again.",
			"abort":  "Ends a rollout: nothing more is sent.",
		}[action])
		server, tokenFile := a.serverFlags(fs)
		channel := channelFlag(fs, "the rollout's channel")
		var body struct {
			Retry bool `json:"retry,omitempty"`
		}
		if action == "resume" {
			fs.BoolVar(&body.Retry, "retry", false, "send the release again to the devices that failed")
		}
		pos, err := parseArgs(fs, usage, args, 1, 1, "ROLLOUT_ID")
		if err != nil {
			return err
		}
		if !rollout.ValidID(pos[0]) {
			return usagef("%q is not a rollout id (ro- and hex digits; termrig release status shows it)", pos[0])
		}
		c, err := newAPIClient(*server, *tokenFile)
		if err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		ch, err := a.channelFor(ctx, c, *channel, selection{rolloutID: pos[0]})
		if err != nil {
			return err
		}
		r, err := postRollout(ctx, c, ch, "/"+pos[0]+"/"+action, action+" of rollout "+pos[0], body)
		if err != nil {
			return err
		}
		a.printRollout(r)
		return nil
	}
}
