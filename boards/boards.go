package boards

import (
	"embed"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
)

//go:embed profiles/*.json
var profiles embed.FS

// maxProfileSize bounds a profile file.
const maxProfileSize = 1 << 20

// Names returns the names of the embedded profiles, sorted.
func Names() []string {
	entries, _ := fs.ReadDir(profiles, "profiles")
	var names []string
	for _, e := range entries {
		if n, ok := strings.CutSuffix(e.Name(), ".json"); ok {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	return names
}

// Load returns the embedded profile called name, such as
// "rpi-lcd2004-i2c".
func Load(name string) (*Profile, error) {
	if !validName(name) {
		return nil, fmt.Errorf("boards: unknown board %q (known: %s)", name, strings.Join(Names(), ", "))
	}
	file := name + ".json"
	data, err := profiles.ReadFile(path.Join("profiles", file))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("boards: unknown board %q (known: %s)", name, strings.Join(Names(), ", "))
	}
	if err != nil {
		return nil, fmt.Errorf("boards: read %s: %w", file, err)
	}
	p, err := Parse(file, data)
	if err != nil {
		return nil, err
	}
	if p.Name != name {
		return nil, &FieldError{File: file, Path: "name", Msg: fmt.Sprintf("%q does not match the file name %q", p.Name, file)}
	}
	return p, nil
}

// LoadFile reads a profile from a JSON file, such as a copy of an embedded
// profile edited for other wiring. Its name defaults to the file name
// without ".json"; a name given in the file need not match the file name.
func LoadFile(file string) (*Profile, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, fmt.Errorf("boards: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxProfileSize+1))
	if err != nil {
		return nil, fmt.Errorf("boards: read %s: %w", file, err)
	}
	if len(data) > maxProfileSize {
		return nil, &FieldError{File: filepath.Base(file), Msg: fmt.Sprintf("larger than %d bytes", maxProfileSize)}
	}
	return Parse(filepath.Base(file), data)
}

// Parse decodes and validates a profile. file names it in errors (and
// gives the default name). Unknown fields, duplicate fields, mistyped and
// out-of-range values are errors; each is a *FieldError with the field's
// path, and validation reports all of them at once (errors.Join).
func Parse(file string, data []byte) (*Profile, error) {
	var p Profile
	if err := decodeStrict(file, data, &p); err != nil {
		return nil, err
	}
	p.applyDefaults()
	if err := p.validate(file); err != nil {
		return nil, err
	}
	if p.Name == "" {
		p.Name = strings.TrimSuffix(file, ".json")
	}
	return &p, nil
}
