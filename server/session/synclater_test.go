package session

import (
	"bytes"
	"context"
	"testing"
)

// With SyncLater an append fsyncs nothing (not the file, not the directory
// for a new file); Sync is one syncfs; the lines are there for readers
// at once, and AppendEncoded writes the same bytes as Append.
func TestSyncLaterDefersFsync(t *testing.T) {
	t.Parallel()
	s, err := Open(t.TempDir(), Options{Logger: quietLogger(), SyncLater: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	recs := []Record{{Role: "user", Content: "hi", MessageID: "m-1"}}
	lines, err := EncodeRecords(recs)
	if err != nil {
		t.Fatal(err)
	}
	if recs[0].Timestamp == "" {
		t.Fatal("EncodeRecords did not set the timestamp in recs")
	}
	if err := s.AppendEncoded(context.Background(), "a:b:c", lines, 1); err != nil {
		t.Fatal(err)
	}
	if err := s.Append(context.Background(), "a:b:d", recs...); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"a:b:c", "a:b:d"} {
		got, err := s.Load(key)
		if err != nil {
			t.Fatal(err)
		}
		if len(got.Records) != 1 || got.Records[0].Timestamp != recs[0].Timestamp || got.Records[0].MessageID != "m-1" {
			t.Fatalf("%s: %+v", key, got.Records)
		}
	}
	if !haveSyncFS {
		return // SyncLater falls back to fsync here
	}
	if st := s.Stats(); st.FileSyncs != 0 || st.DirSyncs != 0 || st.FSSyncs != 0 {
		t.Fatalf("appends synced: %+v", st)
	}
	if err := s.Sync(); err != nil {
		t.Fatal(err)
	}
	if st := s.Stats(); st.FSSyncs != 1 {
		t.Fatalf("Sync: %+v, want one syncfs", st)
	}
}

// FuzzDecodeRecords: DecodeRecords never panics, and what it accepts
// encodes and decodes again to the same records.
func FuzzDecodeRecords(f *testing.F) {
	f.Add([]byte(recLine("a") + "\n"))
	f.Add([]byte(recLine("a") + "\n" + `{"role":"system","message_id":"m","event":"run_interrupted"}` + "\n"))
	f.Add([]byte(`{"role":"user"`))
	f.Add([]byte("\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		recs, err := DecodeRecords(data)
		if err != nil {
			return
		}
		for i := range recs {
			if recs[i].Timestamp == "" {
				recs[i].Timestamp = "t" // EncodeRecords would set it
			}
		}
		enc, err := EncodeRecords(recs)
		if err != nil {
			return // Extra a record cannot carry (metadata _type), an over-long line
		}
		again, err := DecodeRecords(enc)
		if err != nil {
			t.Fatalf("re-encoded records do not decode: %v\n%s", err, enc)
		}
		enc2, _ := EncodeRecords(again)
		if !bytes.Equal(enc, enc2) || len(again) != len(recs) {
			t.Fatalf("round trip changed the records:\n%s\n%s", enc, enc2)
		}
	})
}
