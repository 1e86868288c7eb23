package main

import (
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"termlink/server/config"
)

// dockerStage is one FROM ... stage of a Dockerfile: its image, its
// name and its instructions (continuation lines joined).
type dockerStage struct {
	image, name string
	lines       []string
}

// parseDockerfile splits a Dockerfile into stages, instructions joined
// across "\" continuations, comments dropped.
func parseDockerfile(t *testing.T, path string) []dockerStage {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var stages []dockerStage
	var cur strings.Builder
	flush := func() {
		line := strings.TrimSpace(cur.String())
		cur.Reset()
		if line == "" {
			return
		}
		if f := strings.Fields(line); strings.EqualFold(f[0], "FROM") {
			st := dockerStage{image: f[len(f)-1]}
			if len(f) >= 4 && strings.EqualFold(f[len(f)-2], "AS") {
				st.image, st.name = f[1], f[len(f)-1]
			}
			stages = append(stages, st)
			return
		}
		if len(stages) == 0 {
			t.Fatalf("%s: an instruction before FROM: %s", path, line)
		}
		stages[len(stages)-1].lines = append(stages[len(stages)-1].lines, line)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "#") {
			continue
		}
		if s, ok := strings.CutSuffix(strings.TrimRight(l, " \t"), `\`); ok {
			cur.WriteString(s + " ")
			continue
		}
		cur.WriteString(l)
		flush()
	}
	flush()
	return stages
}

// instr returns the arguments of each instruction op in the stage.
func (s dockerStage) instr(op string) []string {
	var out []string
	for _, l := range s.lines {
		if f := strings.Fields(l); strings.EqualFold(f[0], op) {
			out = append(out, strings.TrimSpace(l[len(f[0]):]))
		}
	}
	return out
}

// The Dockerfile, checked without docker or the network (issue 40 row
// 11): base images pinned by version or digest; termserver built static
// (CGO_ENABLED=0) with the Makefile's version stamp to the Makefile's
// binary path, and that binary the entry point; a non-root user; the
// workspace of the config it ships a volume, its port exposed; the
// context without the history or builds (.dockerignore).
func TestDockerfile(t *testing.T) {
	t.Parallel()
	stages := parseDockerfile(t, "../../Dockerfile")
	if len(stages) < 2 {
		t.Fatalf("%d stages, want a build stage and a run stage", len(stages))
	}
	names := map[string]bool{}
	pinned := regexp.MustCompile(`(:[0-9]+(\.[0-9]+)+[^:@/]*(@sha256:[0-9a-f]{64})?|@sha256:[0-9a-f]{64})$`)
	for _, s := range stages {
		if !names[s.image] && s.image != "scratch" && !pinned.MatchString(s.image) {
			t.Errorf("FROM %s: not pinned (want image:VERSION, e.g. alpine:3.23, or @sha256:DIGEST)", s.image)
		}
		if s.name != "" {
			names[s.name] = true
		}
	}

	// The Makefile's stamp and path.
	mk, err := os.ReadFile("../../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^LDFLAGS := (.*)$`).FindSubmatch(mk)
	if m == nil {
		t.Fatal("Makefile: no LDFLAGS := line")
	}
	stamp := strings.ReplaceAll(string(m[1]), "$(VERSION)", "${VERSION}")
	m = regexp.MustCompile(`(?m)^build:\n\t.*build .*-o (\S+/) \./cmd/\.\.\.`).FindSubmatch(mk)
	if m == nil {
		t.Fatal("Makefile: the build target's go build -o DIR/ ./cmd/... is gone; update this test")
	}
	binPath := string(m[1]) + "termserver"

	var build *dockerStage
	var buildLine string
	for i := range stages {
		for _, r := range stages[i].instr("RUN") {
			if strings.Contains(r, "go build") && strings.Contains(r, "./cmd/termserver") {
				build, buildLine = &stages[i], r
			}
		}
	}
	if build == nil {
		t.Fatal("no stage runs go build ... ./cmd/termserver")
	}
	for _, want := range []string{"CGO_ENABLED=0 ", stamp, "-o " + binPath + " "} {
		if !strings.Contains(buildLine, want) {
			t.Errorf("the build line lacks %q (Makefile: LDFLAGS %q, make build's %s):\n%s", want, stamp, binPath, buildLine)
		}
	}
	if args := build.instr("ARG"); !strings.Contains(strings.Join(args, " "), "VERSION") {
		t.Errorf("the build stage declares no ARG VERSION: %v", args)
	}

	run := stages[len(stages)-1]
	users := run.instr("USER")
	if len(users) == 0 {
		t.Fatal("the run stage sets no USER: it would run as root")
	}
	if u, _, _ := strings.Cut(users[len(users)-1], ":"); u == "root" || u == "0" {
		t.Errorf("USER %s is root", users[len(users)-1])
	}
	entry := run.instr("ENTRYPOINT")
	if len(entry) != 1 {
		t.Fatalf("ENTRYPOINT %v, want one", entry)
	}
	exe := regexp.MustCompile(`^\["([^"]+)"`).FindStringSubmatch(entry[0])
	if exe == nil {
		t.Fatalf("ENTRYPOINT %s: want the exec form [\"/path\", ...]", entry[0])
	}
	copied := false
	var configSrc string
	for _, c := range run.instr("COPY") {
		f := strings.Fields(c)
		dst := f[len(f)-1]
		if dst == exe[1] && strings.Contains(c, "--from=") && strings.HasSuffix(f[len(f)-2], "termserver") {
			copied = true
		}
		if dst == "/etc/termlink/termserver.json" {
			configSrc = f[len(f)-2]
		}
	}
	if !copied {
		t.Errorf("ENTRYPOINT %s is not the termserver the build stage made (COPY --from=... %s)", exe[1], exe[1])
	}
	if cmd := run.instr("CMD"); len(cmd) != 1 || !strings.Contains(cmd[0], "/etc/termlink/termserver.json") {
		t.Errorf("CMD %v: want --config /etc/termlink/termserver.json", cmd)
	}
	if configSrc == "" {
		t.Fatal("no COPY of a config to /etc/termlink/termserver.json")
	}
	cfg, err := config.Load(filepath.Join("../..", configSrc))
	if err != nil {
		t.Fatalf("the image's config: %v", err)
	}
	if vols := strings.Join(run.instr("VOLUME"), " "); !strings.Contains(vols, `"`+cfg.Workspace+`"`) {
		t.Errorf("VOLUME %s does not hold the config's workspace %s", vols, cfg.Workspace)
	}
	host, port, err := net.SplitHostPort(cfg.Listen)
	if err != nil || host != "0.0.0.0" {
		t.Errorf("the image's config listens on %q: want 0.0.0.0:PORT (a container's loopback is its own)", cfg.Listen)
	}
	if exp := run.instr("EXPOSE"); len(exp) != 1 || exp[0] != port {
		t.Errorf("EXPOSE %v, want the config's port %s", exp, port)
	}

	ignore, err := os.ReadFile("../../.dockerignore")
	if err != nil {
		t.Fatal(err)
	}
	lines := map[string]bool{}
	for _, l := range strings.Split(string(ignore), "\n") {
		lines[strings.TrimSpace(l)] = true
	}
	for _, want := range []string{".git", "bin/"} {
		if !lines[want] {
			t.Errorf(".dockerignore lacks %q", want)
		}
	}
	for l := range lines {
		for _, needed := range []string{"go.mod", "go.sum", "cmd", "cmd/", "*.go", "**/*.go", configSrc} {
			if l == needed {
				t.Errorf(".dockerignore leaves out %q, which the build needs", l)
			}
		}
	}
}
