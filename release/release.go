// Package release is what a signed termd release is: an ed25519 key pair
// kept by the operator (release.key never leaves their machine; devices
// pin release.pub), and a manifest beside each binary naming its
// version, platform, size and SHA-256, signed with the key. termrig signs;
// termserver stores and serves; termd verifies the signature against its
// pinned key, and the binary against the manifest, before anything it
// downloaded becomes executable.
package release

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
)

// Key file names in the directory keygen writes.
const (
	PrivateKeyFile = "release.key"
	PublicKeyFile  = "release.pub"
)

// ManifestSuffix is appended to a binary's path for its manifest.
const ManifestSuffix = ".release.json"

// MaxManifestBytes bounds a manifest: ParseManifest refuses more.
const MaxManifestBytes = 4 << 10

// signedPrefix starts the bytes a signature covers (the format's version).
const signedPrefix = "termlink-release-v1\n"

// Manifest describes one signed binary.
type Manifest struct {
	Version   string `json:"version"`
	Platform  string `json:"platform"` // os/arch or os/arch/variant: linux/arm/6, linux/arm64, linux/amd64
	Size      int64  `json:"size"`
	SHA256    string `json:"sha256"`    // lowercase hex of the binary's SHA-256
	Signature string `json:"signature"` // base64 (std) of the ed25519 signature of SignedBytes
}

// SignedBytes are what the signature covers: every other field, one per
// line, after a format tag.
func (m *Manifest) SignedBytes() []byte {
	return []byte(signedPrefix + m.Version + "\n" + m.Platform + "\n" + strconv.FormatInt(m.Size, 10) + "\n" + m.SHA256 + "\n")
}

var (
	versionRE  = regexp.MustCompile(`^[0-9A-Za-z][0-9A-Za-z.+_~-]{0,63}$`)
	platformRE = regexp.MustCompile(`^[a-z0-9]{1,16}/[a-z0-9]{1,16}(/[a-z0-9]{1,8})?$`)
	sha256RE   = regexp.MustCompile(`^[0-9a-f]{64}$`)
)

// CheckVersion says what is wrong with a version string, or nil.
func CheckVersion(v string) error {
	if !versionRE.MatchString(v) {
		return fmt.Errorf("version %q: want 1 to 64 of letters, digits and . + _ ~ -, starting with a letter or digit", v)
	}
	return nil
}

// CheckPlatform says what is wrong with a platform string, or nil.
func CheckPlatform(p string) error {
	if !platformRE.MatchString(p) {
		return fmt.Errorf("platform %q: want os/arch or os/arch/variant, like linux/arm/6, linux/arm64 or linux/amd64", p)
	}
	return nil
}

// ParseManifest decodes and checks a manifest (not its signature: see
// Verify). Every field is required; unknown fields are refused.
func ParseManifest(data []byte) (*Manifest, error) {
	var m Manifest
	if err := decodeStrict("release manifest", data, &m); err != nil {
		return nil, err
	}
	var errs []error
	if err := CheckVersion(m.Version); err != nil {
		errs = append(errs, err)
	}
	if err := CheckPlatform(m.Platform); err != nil {
		errs = append(errs, err)
	}
	if m.Size <= 0 {
		errs = append(errs, fmt.Errorf("size %d: must be positive", m.Size))
	}
	if !sha256RE.MatchString(m.SHA256) {
		errs = append(errs, fmt.Errorf("sha256 %q: want 64 lowercase hex digits", m.SHA256))
	}
	if sig, err := base64.StdEncoding.DecodeString(m.Signature); err != nil || len(sig) != ed25519.SignatureSize {
		errs = append(errs, fmt.Errorf("signature: want the base64 of %d bytes", ed25519.SignatureSize))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("release manifest: %w", err)
	}
	return &m, nil
}

// Marshal encodes m as indented JSON with a final newline.
func (m *Manifest) Marshal() []byte {
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		panic(err) // strings and an int64
	}
	return append(b, '\n')
}

// ErrBadSignature is Verify's error for a signature the key did not make.
var ErrBadSignature = errors.New("release signature does not match the release key")

// Verify checks m's signature against pub.
func (m *Manifest) Verify(pub ed25519.PublicKey) error {
	return verify(pub, m.SignedBytes(), m.Signature)
}

// decodeStrict decodes one JSON value of at most MaxManifestBytes into v,
// refusing unknown fields; what names the document in its errors.
func decodeStrict(what string, data []byte, v any) error {
	if len(data) > MaxManifestBytes {
		return fmt.Errorf("%s: %d bytes, more than %d", what, len(data), MaxManifestBytes)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if dec.More() {
		return fmt.Errorf("%s: more than one JSON value", what)
	}
	return nil
}

// verify checks signature (base64) over signed with pub: ErrBadSignature
// unless it holds.
func verify(pub ed25519.PublicKey, signed []byte, signature string) error {
	sig, err := base64.StdEncoding.DecodeString(signature)
	if err != nil || len(sig) != ed25519.SignatureSize || len(pub) != ed25519.PublicKeySize {
		return ErrBadSignature
	}
	if !ed25519.Verify(pub, signed, sig) {
		return ErrBadSignature
	}
	return nil
}

// Digest reads r to its end and returns its size and lowercase hex SHA-256.
func Digest(r io.Reader) (int64, string, error) {
	h := sha256.New()
	n, err := io.Copy(h, r)
	if err != nil {
		return n, "", err
	}
	return n, hex.EncodeToString(h.Sum(nil)), nil
}

// CheckBinary reads r to its end and says whether it is the binary m
// describes (size and SHA-256).
func (m *Manifest) CheckBinary(r io.Reader) error {
	n, sum, err := Digest(r)
	if err != nil {
		return fmt.Errorf("reading the binary: %w", err)
	}
	if n != m.Size {
		return fmt.Errorf("binary is %d bytes, the manifest says %d (truncated or another file)", n, m.Size)
	}
	if sum != m.SHA256 {
		return fmt.Errorf("binary's sha256 is %s, the manifest says %s", sum, m.SHA256)
	}
	return nil
}

// Sign writes the manifest of the binary at path, as version for
// platform, signed with priv.
func Sign(priv ed25519.PrivateKey, version, platform, path string) (*Manifest, error) {
	if err := errors.Join(CheckVersion(version), CheckPlatform(platform)); err != nil {
		return nil, err
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	n, sum, err := Digest(f)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	if n == 0 {
		return nil, fmt.Errorf("%s is empty", path)
	}
	m := &Manifest{Version: version, Platform: platform, Size: n, SHA256: sum}
	m.Signature = base64.StdEncoding.EncodeToString(ed25519.Sign(priv, m.SignedBytes()))
	return m, nil
}

// GenerateKey writes a new key pair into dir: PrivateKeyFile (0600,
// PKCS #8 PEM) and PublicKeyFile (0644, PKIX PEM). It refuses to
// overwrite an existing key.
func GenerateKey(dir string) (ed25519.PublicKey, error) {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	der, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		return nil, err
	}
	pubDER, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return nil, err
	}
	keyPath := filepath.Join(dir, PrivateKeyFile)
	f, err := os.OpenFile(keyPath, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, os.ErrExist) {
		return nil, fmt.Errorf("%s exists: a release key is never overwritten (move it away first)", keyPath)
	}
	if err != nil {
		return nil, err
	}
	if err := pem.Encode(f, &pem.Block{Type: "PRIVATE KEY", Bytes: der}); err != nil {
		f.Close()
		return nil, err
	}
	if err := errors.Join(f.Sync(), f.Close()); err != nil {
		return nil, err
	}
	pubPEM := pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pubDER})
	if err := os.WriteFile(filepath.Join(dir, PublicKeyFile), pubPEM, 0o644); err != nil {
		return nil, err
	}
	return pub, nil
}

// LoadPrivateKey reads a key GenerateKey wrote.
func LoadPrivateKey(path string) (ed25519.PrivateKey, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	block, _ := pem.Decode(b)
	if block == nil || block.Type != "PRIVATE KEY" {
		return nil, fmt.Errorf("%s: not a PEM \"PRIVATE KEY\" (termrig release keygen writes one)", path)
	}
	k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	priv, ok := k.(ed25519.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("%s: a %T, not an ed25519 key", path, k)
	}
	return priv, nil
}

// ParsePublicKey decodes a PEM public key (the content of PublicKeyFile).
func ParsePublicKey(b []byte) (ed25519.PublicKey, error) {
	block, _ := pem.Decode(b)
	if block == nil || block.Type != "PUBLIC KEY" {
		return nil, errors.New("not a PEM \"PUBLIC KEY\" (termrig release keygen writes release.pub)")
	}
	k, err := x509.ParsePKIXPublicKey(block.Bytes)
	if err != nil {
		return nil, err
	}
	pub, ok := k.(ed25519.PublicKey)
	if !ok {
		return nil, fmt.Errorf("a %T, not an ed25519 key", k)
	}
	return pub, nil
}

// LoadPublicKey reads a public key file.
func LoadPublicKey(path string) (ed25519.PublicKey, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	pub, err := ParsePublicKey(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return pub, nil
}

// CurrentPlatform is the platform this binary was built for: GOOS/GOARCH,
// plus the variant for 32-bit ARM (GOARM: linux/arm/6).
func CurrentPlatform() string {
	p := runtime.GOOS + "/" + runtime.GOARCH
	if runtime.GOARCH == "arm" {
		if bi, ok := debug.ReadBuildInfo(); ok {
			for _, s := range bi.Settings {
				if s.Key == "GOARM" {
					v, _, _ := strings.Cut(s.Value, ",") // "6,softfloat"
					return p + "/" + v
				}
			}
		}
		return p + "/7" // Go's default GOARM on linux
	}
	return p
}

// PatchManifestSuffix is appended to a patch's path for its manifest
// (termrig release delta writes NEW.from-SHA.patch and NEW.from-SHA.patch.json).
const PatchManifestSuffix = ".json"

// patchSignedPrefix starts the bytes a patch manifest's signature covers:
// another tag than a release manifest's, so that neither signature is
// ever taken for the other.
const patchSignedPrefix = "termlink-release-patch-v1\n"

// MaxPatchBytes bounds a patch: what a device downloads at most.
const MaxPatchBytes = 256 << 20

// PatchManifest describes one signed patch (package release/delta):
// applied to the binary whose SHA-256 is FromSHA256 it makes release
// Version for Platform, Size bytes with SHA256 (the release manifest's
// own size and sha256). PatchSize and PatchSHA256 are the patch file's.
type PatchManifest struct {
	Version     string `json:"version"`
	Platform    string `json:"platform"`
	FromSHA256  string `json:"from_sha256"`
	FromVersion string `json:"from_version,omitempty"` // what the operator said the source is: shown, not checked
	Size        int64  `json:"size"`
	SHA256      string `json:"sha256"`
	PatchSize   int64  `json:"patch_size"`
	PatchSHA256 string `json:"patch_sha256"`
	Signature   string `json:"signature"`
}

// SignedBytes are what the signature covers: every other field, one per
// line, after the patch format's tag.
func (m *PatchManifest) SignedBytes() []byte {
	return []byte(patchSignedPrefix + m.Version + "\n" + m.Platform + "\n" + m.FromSHA256 + "\n" + m.FromVersion + "\n" +
		strconv.FormatInt(m.Size, 10) + "\n" + m.SHA256 + "\n" + strconv.FormatInt(m.PatchSize, 10) + "\n" + m.PatchSHA256 + "\n")
}

// ParsePatchManifest decodes and checks a patch manifest (not its
// signature: see Verify). Unknown fields are refused.
func ParsePatchManifest(data []byte) (*PatchManifest, error) {
	var m PatchManifest
	if err := decodeStrict("patch manifest", data, &m); err != nil {
		return nil, err
	}
	var errs []error
	if err := CheckVersion(m.Version); err != nil {
		errs = append(errs, err)
	}
	if err := CheckPlatform(m.Platform); err != nil {
		errs = append(errs, err)
	}
	if m.FromVersion != "" {
		if err := CheckVersion(m.FromVersion); err != nil {
			errs = append(errs, fmt.Errorf("from_version: %w", err))
		}
	}
	if m.Size <= 0 {
		errs = append(errs, fmt.Errorf("size %d: must be positive", m.Size))
	}
	if m.PatchSize <= 0 || m.PatchSize > MaxPatchBytes {
		errs = append(errs, fmt.Errorf("patch_size %d: must be from 1 to %d", m.PatchSize, MaxPatchBytes))
	}
	for name, v := range map[string]string{"from_sha256": m.FromSHA256, "sha256": m.SHA256, "patch_sha256": m.PatchSHA256} {
		if !sha256RE.MatchString(v) {
			errs = append(errs, fmt.Errorf("%s %q: want 64 lowercase hex digits", name, v))
		}
	}
	if m.FromSHA256 != "" && m.FromSHA256 == m.SHA256 {
		errs = append(errs, errors.New("from_sha256 is the result's sha256: a patch of a binary into itself"))
	}
	if sig, err := base64.StdEncoding.DecodeString(m.Signature); err != nil || len(sig) != ed25519.SignatureSize {
		errs = append(errs, fmt.Errorf("signature: want the base64 of %d bytes", ed25519.SignatureSize))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("patch manifest: %w", err)
	}
	return &m, nil
}

// Marshal encodes m as indented JSON with a final newline.
func (m *PatchManifest) Marshal() []byte {
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		panic(err) // strings and int64s
	}
	return append(b, '\n')
}

// Verify checks m's signature against pub.
func (m *PatchManifest) Verify(pub ed25519.PublicKey) error {
	return verify(pub, m.SignedBytes(), m.Signature)
}

// Sign fills in m's signature with priv.
func (m *PatchManifest) Sign(priv ed25519.PrivateKey) {
	m.Signature = base64.StdEncoding.EncodeToString(ed25519.Sign(priv, m.SignedBytes()))
}

// CheckPatch reads r to its end and says whether it is the patch m
// describes (size and SHA-256).
func (m *PatchManifest) CheckPatch(r io.Reader) error {
	n, sum, err := Digest(io.LimitReader(r, m.PatchSize+1))
	if err != nil {
		return fmt.Errorf("reading the patch: %w", err)
	}
	if n != m.PatchSize {
		return fmt.Errorf("patch is %s bytes, its manifest says %d", map[bool]string{true: "more than " + strconv.FormatInt(m.PatchSize, 10), false: strconv.FormatInt(n, 10)}[n > m.PatchSize], m.PatchSize)
	}
	if sum != m.PatchSHA256 {
		return fmt.Errorf("patch's sha256 is %s, its manifest says %s", sum, m.PatchSHA256)
	}
	return nil
}

// Matches says whether the patch makes the release r describes.
func (m *PatchManifest) Matches(r *Manifest) error {
	if r.Version != m.Version || r.Platform != m.Platform || r.Size != m.Size || r.SHA256 != m.SHA256 {
		return fmt.Errorf("the patch makes %s for %s (%d bytes, sha256 %s), the release is %s for %s (%d bytes, sha256 %s)",
			m.Version, m.Platform, m.Size, short(m.SHA256), r.Version, r.Platform, r.Size, short(r.SHA256))
	}
	return nil
}

func short(s string) string { return s[:min(16, len(s))] }
