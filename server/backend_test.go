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
	if _, ok := ts.backend.(localBackend); !ok {
		t.Fatalf("single server: backend %T", ts.backend)
	}
	if _, ok := ts.rt.Records.Store.(*local.Store); !ok {
		t.Errorf("single server: store of record %T", ts.rt.Records.Store)
	}
	if _, ok := ts.fleet.reg.(*registry.Registry); !ok {
		t.Errorf("single server: device registry %T", ts.fleet.reg)
	}
	if ts.rt.EventFeed() != nil {
		t.Errorf("single server: an event feed %T", ts.rt.EventFeed())
	}
	if st := noticeStorage(t, ts.Server); st != nil {
		if _, ok := st.(*notices.LocalStorage); !ok {
			t.Errorf("single server: notice storage %T", st)
		}
	}

	cs, _ := startClusterServer(t, newCountingRunner(false), nil, nil)
	if _, ok := cs.backend.(clusterBackend); !ok {
		t.Fatalf("cluster: backend %T", cs.backend)
	}
	if _, ok := cs.rt.Records.Store.(*cluster.Store); !ok {
		t.Errorf("cluster: store of record %T", cs.rt.Records.Store)
	}
	if _, ok := cs.fleet.reg.(*cluster.Devices); !ok {
		t.Errorf("cluster: device registry %T", cs.fleet.reg)
	}
	if st := noticeStorage(t, cs.Server); st != nil {
		if _, ok := st.(*cluster.NoticeStorage); !ok {
			t.Errorf("cluster: notice storage %T", st)
		}
	}
	if _, ok := cs.rt.EventFeed().(clusterEvents); !ok {
		t.Errorf("cluster: event feed %T", cs.rt.EventFeed())
	}
}

// noticeStorage returns where s's notice mailboxes keep their records
// (the rules are notices.Service's in both modes).
func noticeStorage(t *testing.T, s *Server) notices.Storage {
	t.Helper()
	svc, ok := s.notices.(*notices.Service)
	if !ok {
		t.Errorf("notice mailboxes %T, want package notices' Service", s.notices)
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
