package terminal

import (
	"os"
	"path/filepath"
	"strings"
	"unicode"
)

// Media classes of the spec's supported extensions.
const (
	MediaImage    = "image"
	MediaVideo    = "video"
	MediaAudio    = "audio"
	MediaDocument = "document"
)

// mediaExts are the extensions plain-text detection looks for.
var mediaExts = map[string]string{
	".jpg": MediaImage, ".jpeg": MediaImage, ".png": MediaImage, ".gif": MediaImage, ".webp": MediaImage,
	".mp4": MediaVideo, ".mov": MediaVideo, ".avi": MediaVideo, ".mkv": MediaVideo, ".webm": MediaVideo,
	".mp3": MediaAudio, ".ogg": MediaAudio, ".m4a": MediaAudio, ".wav": MediaAudio, ".flac": MediaAudio,
	".pdf": MediaDocument,
}

// MediaKind returns the media class of path by its extension (any case):
// MediaImage, MediaVideo, MediaAudio or MediaDocument, or "" for an
// extension plain-text detection ignores.
func MediaKind(path string) string {
	return mediaExts[strings.ToLower(filepath.Ext(path))]
}

// DetectMedia finds the media files named in an agent's plain text, as the
// spec's plain mode does: absolute paths with a media extension (images,
// videos, audio, .pdf; see [MediaKind]) whose file exists and is a regular
// file. A path is a run of characters without white space, quotes or
// brackets that starts with '/' (also right after "=" or ":", as in
// "saved:/tmp/a.png"); trailing sentence punctuation is not part of it.
// URLs are ignored. Each file is listed once, in order of appearance,
// cleaned (filepath.Clean).
func DetectMedia(text string) []string {
	var out []string
	seen := map[string]bool{}
	for _, tok := range strings.FieldsFunc(text, isPathSep) {
		tok = strings.TrimRight(tok, ".,;:!?")
		if strings.Contains(tok, "://") {
			continue
		}
		i := strings.IndexByte(tok, '/')
		if i < 0 || (i > 0 && tok[i-1] != '=' && tok[i-1] != ':') {
			continue
		}
		p := filepath.Clean(tok[i:])
		if MediaKind(p) == "" || seen[p] || !isFile(p) {
			continue
		}
		seen[p] = true
		out = append(out, p)
	}
	return out
}

func isPathSep(r rune) bool {
	if unicode.IsSpace(r) {
		return true
	}
	switch r {
	case '"', '\'', '`', '<', '>', '(', ')', '[', ']', '{', '}', '|', ',', ';', '*':
		return true
	}
	return false
}

func isFile(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular()
}
