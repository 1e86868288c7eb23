package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"termlink/link"
)

// The device commands (issue 28): operating a channel's devices through
// termserver's operator API. "settings" is here; logs and selftest are
// deviceDiag's (diag.go).

const deviceSynopsis = `settings [flags]

  settings --server URL [--admin-token-file F] [--channel C] (--peer P | --tag k=v)
           [--idle-text T] [--idle-seconds N] [--backlight-off-after N] [--notice-seconds N]
           [--log-level L] [--set-tag k=v ...] [--unknown-ok] [--delete]
      sets (replacing it whole) or deletes the settings document of a peer or a tag;
      the server pushes the channel's new settings version to its online devices;
      a document that no known device matches is refused (exit 1) without --unknown-ok
  settings --server URL [--channel C] --peer P --show
      a device's effective settings, where they come from, the version it applied
  settings --server URL [--channel C] --show
      every settings document of the channel

Without --channel: the server's only channel, or the one the peer or the
tag's devices are on; a server with several channels otherwise refuses
the command (exit 2), naming them.

Run 'termrig device settings -h' for its flags.`

// deviceSummaries are the device commands, as termrig --help lists them.
var deviceSummaries = []subSummary{
	{"settings", "set, delete or show a peer's or a tag's settings document"},
	{"logs", "the end of a connected device's log"},
	{"selftest", "run a connected device's self-checks; exit 1 when one fails"},
}

// deviceCommands are the device commands by name.
func (a *app) deviceCommands() map[string]func(context.Context, []string) error {
	return map[string]func(context.Context, []string) error{
		"settings": a.deviceSettings,
		"logs":     a.deviceLogs,
		"selftest": a.deviceSelftest,
	}
}

func (a *app) device(ctx context.Context, args []string) error {
	if len(args) == 0 {
		return usagef("which device command? settings, logs or selftest")
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		fmt.Fprintf(a.stdout, "Usage: termrig device %s\n\nUsage: termrig device %s\n", deviceSynopsis, deviceDiagSynopsis)
		return flag.ErrHelp
	}
	if cmd, ok := a.deviceCommands()[args[0]]; ok {
		return cmd(ctx, args[1:])
	}
	return usagef("unknown device command %q: settings, logs or selftest", args[0])
}

// optInt is an int flag that knows whether it was given.
type optInt struct{ p **int }

func (f optInt) String() string {
	if f.p == nil || *f.p == nil {
		return ""
	}
	return strconv.Itoa(**f.p)
}

func (f optInt) Set(s string) error {
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		return fmt.Errorf("want a whole number of seconds, 0 or more")
	}
	*f.p = &n
	return nil
}

// tagList is a repeated k=v flag.
type tagList map[string]string

func (t tagList) String() string { return "" }

func (t tagList) Set(s string) error {
	k, v, ok := strings.Cut(s, "=")
	if !ok || k == "" || v == "" {
		return fmt.Errorf("want key=value, e.g. site=lobby")
	}
	if prev, dup := t[k]; dup && prev != v {
		return fmt.Errorf("key %q given twice (%q and %q)", k, prev, v)
	}
	t[k] = v
	return nil
}

func (a *app) deviceSettings(ctx context.Context, args []string) error {
	fs, usage := a.newFlagSet("device settings", `--server URL (--peer P | --tag k=v) [settings] [--delete] | --show

Sets a peer's or a tag's settings document (every flag given; one not
given is not set: the device keeps its own value), deletes it, or shows
settings. A change goes to the channel's online devices at once, and to
the others when they connect.`)
	server, tokenFile := a.serverFlags(fs)
	channel := channelFlag(fs, "the devices' channel")
	peer := fs.String("peer", "", "the device's `peer_id`")
	tag := fs.String("tag", "", "the `key=value` tag whose devices the document applies to")
	var body link.Settings // the document, as the API takes it (no version: the server sets it)
	idleText := fs.String("idle-text", "", "the idle screen's `text`")
	fs.Var(optInt{&body.IdleSeconds}, "idle-seconds", "`N` seconds without a key before the idle screen (0: never)")
	fs.Var(optInt{&body.BacklightOffAfter}, "backlight-off-after", "`N` seconds without a key before the backlight goes off (0: never)")
	fs.Var(optInt{&body.NoticeSeconds}, "notice-seconds", "`N` seconds a notice without its own time stays on the screen")
	fs.StringVar(&body.LogLevel, "log-level", "", "termd's log `level`: debug, info, warn or error")
	setTags := tagList{}
	fs.Var(setTags, "set-tag", "`key=value`: a tag the device gets (repeat; only with --peer; they replace its own)")
	del := fs.Bool("delete", false, "delete the document")
	show := fs.Bool("show", false, "show the device's effective settings (--peer), or every document")
	unknownOK := fs.Bool("unknown-ok", false, "set the document even though no device the server knows matches it yet (it applies when one connects)")
	if err := parse(fs, usage, args); err != nil {
		return err
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	if given["idle-text"] {
		body.IdleText = idleText
	}
	if len(setTags) > 0 {
		body.Tags = setTags
	}
	sets := slices.ContainsFunc([]string{"idle-text", "idle-seconds", "backlight-off-after", "notice-seconds", "log-level", "set-tag"},
		func(n string) bool { return given[n] })
	var docPath string
	switch {
	case *peer != "" && *tag != "":
		return usagef("--peer and --tag exclude each other: a document is a peer's or a tag's")
	case *peer != "":
		docPath = "peers/" + url.PathEscape(*peer)
	case *tag != "":
		k, v, ok := strings.Cut(*tag, "=")
		if !ok || k == "" || v == "" {
			return usagef("--tag %q: want key=value, e.g. --tag site=lobby", *tag)
		}
		docPath = "tags/" + url.PathEscape(k) + "/" + url.PathEscape(v)
	}
	switch {
	case *show && (sets || *del):
		return usagef("--show changes nothing: leave out --delete and the settings")
	case *show && *tag != "":
		return usagef("--show takes --peer (a device's effective settings) or nothing (every document), not --tag")
	case *del && sets:
		return usagef("--delete removes the whole document: leave out the settings")
	case !*show && docPath == "":
		return usagef("which document? --peer P or --tag key=value (or --show)")
	case !*show && !*del && !sets:
		return usagef("no settings given: --idle-text, --idle-seconds, --backlight-off-after, --notice-seconds, --log-level or --set-tag (or --delete, --show)")
	}
	c, err := newAPIClient(*server, *tokenFile)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	var sel selection
	switch {
	case *peer != "":
		sel.peers = []string{*peer}
	case *tag != "":
		sel.tag = *tag
	}
	ch, err := a.channelFor(ctx, c, *channel, sel)
	if err != nil {
		return err
	}
	if !*show && !*del && !*unknownOK {
		// A document no device gets is most often a typo, or the wrong
		// channel: say so instead of pushing to nobody.
		ok, err := c.selected(ctx, ch, sel)
		if err != nil {
			return err
		}
		if !ok {
			fmt.Fprintf(a.stderr, "termrig device settings: no device on channel %s matches %s (a device is known once it has connected): nothing was set; --unknown-ok sets it for a device yet to come\n", ch, sel)
			return exitFailed
		}
	}
	chPath := c.base + "/api/channels/" + url.PathEscape(ch)
	switch {
	case *show && *peer != "":
		return a.showPeerSettings(ctx, c, chPath+"/peers/"+url.PathEscape(*peer)+"/settings")
	case *show:
		return a.showSettingsDocs(ctx, c, chPath+"/settings")
	}
	method, what := http.MethodPut, "setting the settings of "
	var reqBody *strings.Reader
	if *del {
		method, what, reqBody = http.MethodDelete, "deleting the settings of ", strings.NewReader("")
	} else {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		reqBody = strings.NewReader(string(b))
	}
	target := "peer " + *peer
	if *tag != "" {
		target = "tag " + *tag
	}
	req, err := http.NewRequestWithContext(ctx, method, chPath+"/settings/"+docPath, reqBody)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json") // the guard asks it of every write
	b, err := c.do(req, what+target)
	if err != nil {
		return err
	}
	var ans struct {
		Version int64 `json:"version"`
		Pushed  int   `json:"pushed"`
	}
	if err := json.Unmarshal(b, &ans); err != nil {
		return fmt.Errorf("%s%s: the answer is not JSON: %v", what, target, err)
	}
	verb := "set"
	if *del {
		verb = "deleted"
	}
	fmt.Fprintf(a.stdout, "%s the settings of %s on %s: version %d, pushed to %d online device(s)\n", verb, target, ch, ans.Version, ans.Pushed)
	return nil
}

// peerSettings is GET .../peers/{peer}/settings.
type peerSettings struct {
	PeerID         string            `json:"peer_id"`
	Version        int64             `json:"version"`
	Settings       map[string]any    `json:"settings"`
	Sources        []string          `json:"sources"`
	AppliedVersion int64             `json:"applied_version"`
	Error          string            `json:"error"`
	Current        bool              `json:"current"`
	Known          bool              `json:"known"`
	Online         bool              `json:"online"`
	Listens        bool              `json:"listens"`
	Tags           map[string]string `json:"tags"`
}

func (a *app) showPeerSettings(ctx context.Context, c *apiClient, u string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	b, err := c.do(req, "reading the device's settings")
	if err != nil {
		return err
	}
	var p peerSettings
	if err := json.Unmarshal(b, &p); err != nil {
		return fmt.Errorf("reading the device's settings: %v", err)
	}
	state := "offline"
	switch {
	case !p.Known:
		state = "not seen yet"
	case p.Online:
		state = "online"
	}
	if p.Known && !p.Listens {
		state += ", does not take pushed settings (its termd lists no \"settings\")"
	}
	applied := fmt.Sprintf("applied %d", p.AppliedVersion)
	if p.Current {
		applied += ": current"
	} else if p.Version > 0 {
		applied += ": not current"
	}
	w := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(w, "peer\t%s (%s)\n", p.PeerID, state)
	fmt.Fprintf(w, "version\t%d (%s)\n", p.Version, applied)
	if p.Error != "" {
		fmt.Fprintf(w, "refused\t%s\n", p.Error)
	}
	src := strings.Join(p.Sources, ", ")
	if src == "" {
		src = "no document: the device's own values"
	}
	fmt.Fprintf(w, "from\t%s\n", src)
	for _, k := range slices.Sorted(maps.Keys(p.Settings)) {
		if k == "version" {
			continue
		}
		v, _ := json.Marshal(p.Settings[k])
		fmt.Fprintf(w, "%s\t%s\n", k, v)
	}
	fmt.Fprintf(w, "tags now\t%s\n", tagsLine(p.Tags))
	return w.Flush()
}

func tagsLine(tags map[string]string) string {
	keys := slices.Sorted(maps.Keys(tags))
	for i, k := range keys {
		keys[i] = k + "=" + tags[k]
	}
	if len(keys) == 0 {
		return "-"
	}
	return strings.Join(keys, ",")
}

func (a *app) showSettingsDocs(ctx context.Context, c *apiClient, u string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	b, err := c.do(req, "reading the settings documents")
	if err != nil {
		return err
	}
	var l struct {
		ChannelID    string           `json:"channel_id"`
		Version      int64            `json:"version"`
		Documents    int              `json:"documents"`
		MaxDocuments int              `json:"max_documents"`
		Tags         []map[string]any `json:"tags"`
		Peers        []map[string]any `json:"peers"`
	}
	if err := json.Unmarshal(b, &l); err != nil {
		return fmt.Errorf("reading the settings documents: %v", err)
	}
	fmt.Fprintf(a.stdout, "channel %s: settings version %d, %d of %d documents\n", l.ChannelID, l.Version, l.Documents, l.MaxDocuments)
	w := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "DOCUMENT\tVERSION\tBY\tSETTINGS")
	row := func(name string, d map[string]any) {
		var parts []string
		for _, k := range slices.Sorted(maps.Keys(d)) {
			switch k {
			case "tag", "peer_id", "version", "updated_at", "updated_by":
				continue
			}
			v, _ := json.Marshal(d[k])
			parts = append(parts, k+"="+string(v))
		}
		fmt.Fprintf(w, "%s\t%v\t%v\t%s\n", name, d["version"], d["updated_by"], strings.Join(parts, " "))
	}
	for _, d := range l.Tags {
		row(fmt.Sprint("tag ", d["tag"]), d)
	}
	for _, d := range l.Peers {
		row(fmt.Sprint("peer ", d["peer_id"]), d)
	}
	return w.Flush()
}
