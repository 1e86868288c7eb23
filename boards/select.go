package boards

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// The board flags of termd and termrig are one family: --board NAME picks
// an embedded profile, --board-file PATH reads a profile file. CheckFlags
// and Select give both binaries the same rules and the same words.

// LooksLikeFile reports whether a --board value is a path rather than a
// profile name: it has a path separator, ends in .json, or is not an
// embedded profile's name but names a file that exists.
func LooksLikeFile(name string) bool {
	if strings.ContainsRune(name, '/') || strings.ContainsRune(name, filepath.Separator) ||
		strings.HasSuffix(strings.ToLower(name), ".json") {
		return true
	}
	if slices.Contains(Names(), name) {
		return false
	}
	fi, err := os.Stat(name)
	return err == nil && !fi.IsDir()
}

// CheckFlags checks the values of --board (name) and --board-file (file),
// "" for a flag not given: not both, and no path in --board (the error
// suggests --board-file with it).
func CheckFlags(name, file string) error {
	switch {
	case name != "" && file != "":
		return fmt.Errorf("--board %s and --board-file %s exclude each other: give one", name, file)
	case name != "" && LooksLikeFile(name):
		return fmt.Errorf("--board takes a board name (known: %s); for the profile file %s use --board-file %s", strings.Join(Names(), ", "), name, name)
	}
	return nil
}

// Select loads the profile the flags name (see CheckFlags): the file of
// --board-file, else the embedded profile of --board. An unknown name's
// error lists the known ones and points at --board-file.
func Select(name, file string) (*Profile, error) {
	if err := CheckFlags(name, file); err != nil {
		return nil, err
	}
	if file != "" {
		return LoadFile(file)
	}
	if name == "" {
		return nil, fmt.Errorf("no board: give --board NAME (%s) or --board-file PATH", strings.Join(Names(), ", "))
	}
	p, err := Load(name)
	var fe *FieldError
	if err != nil && !errors.As(err, &fe) {
		return nil, fmt.Errorf("%w; a profile file goes in --board-file PATH", err)
	}
	return p, err
}
