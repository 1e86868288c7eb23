package registry

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
)

// Tags pushed settings gave a device replace its tags (filters see them,
// the byte budget counts them, a restart keeps them); an unknown device
// is not created.
func TestSetTags(t *testing.T) {
	dir := t.TempDir()
	r := open(t, dir, nil)
	r.Connected(dev("kiosk-1", map[string]string{"site": "lobby"}))
	before := r.Usage("ch").Bytes
	if !r.SetTags("ch", "kiosk-1", map[string]string{"site": "cafe", "floor": "2", "bad key": "x"}) {
		t.Fatal("SetTags of a known device: false")
	}
	if r.SetTags("ch", "nobody", map[string]string{"a": "b"}) {
		t.Fatal("SetTags made up a device")
	}
	if got := r.List("ch", Filter{Tags: map[string]string{"site": "cafe"}}); len(got) != 1 || !reflect.DeepEqual(got[0].Tags, map[string]string{"site": "cafe", "floor": "2"}) {
		t.Fatalf("by the new tag: %+v", got)
	}
	if after := r.Usage("ch").Bytes; after <= before {
		t.Errorf("the byte budget did not count the longer tags: %d then %d", before, after)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	r2 := open(t, dir, nil)
	defer r2.Close()
	if p, _ := r2.Get("ch", "kiosk-1"); p.Tags["site"] != "cafe" || p.Tags["floor"] != "2" {
		t.Fatalf("after a restart: %v", p.Tags)
	}
}

func TestCheckTags(t *testing.T) {
	long := map[string]string{}
	for i := range 10 {
		long[fmt.Sprintf("k%d", i)] = strings.Repeat("v", MaxTagValue)
	}
	many := map[string]string{}
	for i := range MaxTags + 1 {
		many[fmt.Sprint("k", i)] = "v"
	}
	for _, tc := range []struct {
		tags map[string]string
		want string
	}{
		{map[string]string{"site": "lobby"}, ""},
		{many, "33 tags: at most 32"},
		{long, "the tags take"},
		{map[string]string{"-x": "v"}, `tag "-x": the key may hold only`},
		{map[string]string{"x": "a\nb"}, `tag "x": the value must be UTF-8 text without control characters`},
	} {
		err := CheckTags(tc.tags)
		if (tc.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%v: %v, want %q", tc.tags, err, tc.want)
		}
	}
}
