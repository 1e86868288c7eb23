package server

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"termlink/server/cluster"
	"termlink/server/notices"
	"termlink/server/record/local"
	"termlink/server/registry"
)

// The config picks the backend once, and every store is that backend's:
// a single server's are the workspace's, a cluster node's the cluster's.
// (identity_test.go checks the bindings and codes.)
func TestBackendOpensEveryStore(t *testing.T) {
	t.Parallel()
	ts := startServer(t, nil, nil)
	if _, ok := ts.rt.backend.(localBackend); !ok {
		t.Fatalf("single server: backend %T", ts.rt.backend)
	}
	if _, ok := ts.rt.records.Store.(*local.Store); !ok {
		t.Errorf("single server: store of record %T", ts.rt.records.Store)
	}
	if _, ok := ts.rt.fleet.reg.(*registry.Registry); !ok {
		t.Errorf("single server: device registry %T", ts.rt.fleet.reg)
	}
	if ts.rt.eventFeed != nil {
		t.Errorf("single server: an event feed %T", ts.rt.eventFeed)
	}
	if st := noticeStorage(t, ts.rt); st != nil {
		if _, ok := st.(*notices.LocalStorage); !ok {
			t.Errorf("single server: notice storage %T", st)
		}
	}

	cs, _ := startClusterServer(t, newCountingRunner(false), nil, nil)
	if _, ok := cs.rt.backend.(clusterBackend); !ok {
		t.Fatalf("cluster: backend %T", cs.rt.backend)
	}
	if _, ok := cs.rt.records.Store.(*cluster.Store); !ok {
		t.Errorf("cluster: store of record %T", cs.rt.records.Store)
	}
	if _, ok := cs.rt.fleet.reg.(*cluster.Devices); !ok {
		t.Errorf("cluster: device registry %T", cs.rt.fleet.reg)
	}
	if st := noticeStorage(t, cs.rt); st != nil {
		if _, ok := st.(*cluster.NoticeStorage); !ok {
			t.Errorf("cluster: notice storage %T", st)
		}
	}
	if _, ok := cs.rt.eventFeed.(clusterEvents); !ok {
		t.Errorf("cluster: event feed %T", cs.rt.eventFeed)
	}
}

// noticeStorage returns where rt's notice mailboxes keep their records
// (the rules are notices.Service's in both modes).
func noticeStorage(t *testing.T, rt *Runtime) notices.Storage {
	t.Helper()
	svc, ok := rt.notices.(*notices.Service)
	if !ok {
		t.Errorf("notice mailboxes %T, want package notices' Service", rt.notices)
		return nil
	}
	return svc.Storage()
}

// Only backend.go of the root knows the cluster: the other wiring files
// ask the backend (DESIGN.md: "the config picks local or cluster once").
func TestOnlyTheBackendImportsCluster(t *testing.T) {
	t.Parallel()
	allowed := map[string]bool{
		"backend.go": true,
	}
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") || allowed[name] {
			continue
		}
		src, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		f, err := parser.ParseFile(fset, name, src, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range f.Imports {
			if p, _ := strconv.Unquote(imp.Path.Value); p == "termlink/server/cluster" {
				t.Errorf("%s imports %s: open its store through the backend (backend.go)", name, p)
			}
		}
	}
}
