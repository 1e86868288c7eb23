package session

import (
	"context"
	"os"
	"testing"
)

// FuzzLoad writes arbitrary bytes as a session file: Load must never fail
// or panic because of the content, and an Append after it must add exactly
// one record, on its own line, that Load reads back.
func FuzzLoad(f *testing.F) {
	for _, seed := range []string{
		"",
		"\n",
		metaLine + "\n" + recLine("a") + "\n",
		metaLine + "\n" + recLine("a") + "\n" + `{"role":"user","con`,
		metaLine + "\ngarbage\n" + recLine("b"),
		recLine("no meta") + "\n",
		`{"_type":"metadata","key":7,"metadata":null,"last_consolidated":"x"}` + "\n",
		`{"_type":"metadata"}` + "\n" + `{"_type":"metadata"}` + "\n",
		"[1]\nnull\n{}\n\"s\"\r\n",
		`{"role":"assistant","content":null,"tool_calls":[{"id":"c"}],"n":1e999}`,
		"\xff\xfe{\"a\":\"\xff\"}\n",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := Open(t.TempDir(), Options{Logger: quietLogger(), NoSync: true, maxLine: 256})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		const key = "fuzz:key"
		path := pathOf(t, s, key)
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		before, err := s.Load(key)
		if err != nil {
			t.Fatalf("Load: %v", err)
		}
		if before.Meta.Key == "" || before.Meta.Metadata == nil {
			t.Fatalf("meta %+v", before.Meta)
		}
		for _, r := range before.Records {
			if _, err := r.MarshalJSON(); err != nil {
				t.Fatalf("loaded record %+v does not encode: %v", r, err)
			}
		}
		if err := s.Append(context.Background(), key, Record{Role: "user", Content: "fuzz-marker"}); err != nil {
			t.Fatalf("Append: %v", err)
		}
		after, err := s.Load(key)
		if err != nil {
			t.Fatalf("Load after Append: %v", err)
		}
		if len(after.Records) != len(before.Records)+1 || after.Records[len(after.Records)-1].Content != "fuzz-marker" {
			t.Fatalf("%d records before, %d after append", len(before.Records), len(after.Records))
		}
		if err := s.UpdateMetadata(context.Background(), key, func(m map[string]any) { m["fuzz"] = true }); err != nil {
			t.Fatalf("UpdateMetadata: %v", err)
		}
		updated, err := s.Load(key)
		if err != nil {
			t.Fatalf("Load after UpdateMetadata: %v", err)
		}
		if len(updated.Records) != len(after.Records) || updated.Meta.Metadata["fuzz"] != true {
			t.Fatalf("UpdateMetadata: %d records (want %d), metadata %v", len(updated.Records), len(after.Records), updated.Meta.Metadata)
		}
	})
}
