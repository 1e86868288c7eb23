package main

import (
	"fmt"
	"regexp"
	"sort"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Bounds of --tag.
const (
	maxTags        = 32
	maxTagValueLen = 128
)

var tagKeyRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

// parseTag parses one --tag value, key=value: the key is 1-64 of A-Z a-z
// 0-9 . _ - (starting with a letter or digit), the value up to 128
// printable characters (it may be empty).
func parseTag(s string) (key, value string, err error) {
	key, value, ok := strings.Cut(s, "=")
	switch {
	case !ok:
		return "", "", fmt.Errorf("%q: want key=value, e.g. site=lobby", s)
	case !tagKeyRE.MatchString(key):
		return "", "", fmt.Errorf("%q: the key must be 1-64 of A-Z a-z 0-9 . _ - starting with a letter or digit", s)
	case !utf8.ValidString(value):
		return "", "", fmt.Errorf("%q: the value is not UTF-8", s)
	case utf8.RuneCountInString(value) > maxTagValueLen:
		return "", "", fmt.Errorf("%q: the value is longer than %d characters", s, maxTagValueLen)
	case strings.IndexFunc(value, func(r rune) bool { return !unicode.IsPrint(r) }) >= 0:
		return "", "", fmt.Errorf("%q: the value holds a control character", s)
	}
	return key, value, nil
}

// tagFlag is the repeatable --tag key=value flag.
type tagFlag map[string]string

func (f tagFlag) String() string {
	keys := make([]string, 0, len(f))
	for k := range f {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for i, k := range keys {
		keys[i] = k + "=" + f[k]
	}
	return strings.Join(keys, ",")
}

func (f tagFlag) Set(s string) error {
	k, v, err := parseTag(s)
	if err != nil {
		return err
	}
	if _, dup := f[k]; dup {
		return fmt.Errorf("%q: tag %s is given twice", s, k)
	}
	if len(f) >= maxTags {
		return fmt.Errorf("%q: at most %d tags", s, maxTags)
	}
	f[k] = v
	return nil
}
