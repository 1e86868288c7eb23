package link

import (
	"strings"
	"testing"
)

// Issue 43's optional fields: connect's binary_sha256 and update's
// patch_url and patch_manifest go through encode and decode, and an
// update with one of the patch fields but not the other is refused,
// naming the missing one.
func TestPatchFields(t *testing.T) {
	sum := strings.Repeat("ab", 32)
	b, err := Encode(&Connect{PeerID: "a", BinarySHA256: sum})
	if err != nil || !strings.Contains(string(b), `"binary_sha256":"`+sum+`"`) {
		t.Fatalf("encode: %s %v", b, err)
	}
	f, err := Decode(b)
	if c, ok := f.(*Connect); err != nil || !ok || c.BinarySHA256 != sum {
		t.Fatalf("decode: %#v %v", f, err)
	}
	u := &Update{UpdateID: "u1", Version: "1.1", Manifest: "{}", URL: "/b", PatchURL: "/p", PatchManifest: "{}"}
	if b, err = Encode(u); err != nil {
		t.Fatal(err)
	}
	if f, err := Decode(b); err != nil || *f.(*Update) != *u {
		t.Fatalf("decode: %#v %v", f, err)
	}
	for missing, u := range map[string]*Update{
		"patch_manifest": {UpdateID: "u1", Version: "1.1", Manifest: "{}", URL: "/b", PatchURL: "/p"},
		"patch_url":      {UpdateID: "u1", Version: "1.1", Manifest: "{}", URL: "/b", PatchManifest: "{}"},
	} {
		b, _ := Encode(u)
		if _, err := Decode(b); err == nil || !strings.Contains(err.Error(), missing) {
			t.Errorf("without %s: %v", missing, err)
		}
	}
}
