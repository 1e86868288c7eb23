package config

import (
	"slices"
	"strings"
	"testing"
)

// Issue 43: the tag keys termserver_devices_health_by_tag may use as
// labels are the operator's, each a valid tag key, at most 8; a bad one
// is refused naming it.
func TestMetricsHealthTagKeys(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   string // the value of "metrics"; "" leaves the key out
		want []string
		err  string
	}{
		{"none by default", "", nil, ""},
		{"empty block", `{}`, nil, ""},
		{"keys", `{"healthTagKeys": ["site", "floor"]}`, []string{"site", "floor"}, ""},
		{"snake case", `{"health_tag_keys": ["site"]}`, []string{"site"}, ""},
		{"bad key", `{"healthTagKeys": ["site", "my floor"]}`, nil,
			`config: metrics.healthTagKeys[1]: invalid tag key "my floor": the key may hold only A-Z a-z 0-9 . _ - and must start with a letter or digit`},
		{"key too long", `{"healthTagKeys": ["` + strings.Repeat("k", 65) + `"]}`, nil, "config: metrics.healthTagKeys[0]: invalid tag key"},
		{"empty key", `{"healthTagKeys": [""]}`, nil, "config: metrics.healthTagKeys[0]: must not be empty"},
		{"twice", `{"healthTagKeys": ["site", "site"]}`, nil, `config: metrics.healthTagKeys[1]: tag key "site" is given twice`},
		{"too many", `{"healthTagKeys": ["a", "b", "c", "d", "e", "f", "g", "h", "i"]}`, nil, "config: metrics.healthTagKeys: 9 keys: at most 8"},
		{"not a list", `{"healthTagKeys": "site"}`, nil, "config: metrics.healthTagKeys: must be an array of strings, got string"},
		{"unknown key", `{"tagKeys": ["site"]}`, nil, "config: metrics.tagKeys: unknown key (known: healthTagKeys)"},
		{"not an object", `true`, nil, "config: metrics: must be an object, got boolean"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := `{` + adminCh
			if tc.in != "" {
				in += `, "metrics": ` + tc.in
			}
			cfg, err := Parse([]byte(in + `}`))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("Parse(%s) error = %v, want %q", in, err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(cfg.Metrics.HealthTagKeys, tc.want) {
				t.Fatalf("HealthTagKeys = %q, want %q", cfg.Metrics.HealthTagKeys, tc.want)
			}
		})
	}
}
