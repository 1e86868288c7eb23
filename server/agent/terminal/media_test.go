package terminal

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestDetectMedia(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	exts := []string{".jpg", ".jpeg", ".png", ".gif", ".webp", ".mp4", ".mov", ".avi", ".mkv", ".webm",
		".mp3", ".ogg", ".m4a", ".wav", ".flac", ".pdf", ".PNG", ".Pdf"}
	kinds := map[string]string{}
	for _, ext := range exts {
		p := filepath.Join(dir, "f"+ext)
		if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
		kinds[p] = MediaKind(p)
	}
	for _, name := range []string{"notes.txt", "archive.zip", "noext"} {
		os.WriteFile(filepath.Join(dir, name), []byte("x"), 0o644)
	}
	os.Mkdir(filepath.Join(dir, "dir.png"), 0o755)
	file := func(name string) string { return filepath.Join(dir, name) }

	for p, kind := range kinds {
		ext := strings.ToLower(filepath.Ext(p))
		want := map[string]string{".jpg": "image", ".jpeg": "image", ".png": "image", ".gif": "image", ".webp": "image",
			".mp4": "video", ".mov": "video", ".avi": "video", ".mkv": "video", ".webm": "video",
			".mp3": "audio", ".ogg": "audio", ".m4a": "audio", ".wav": "audio", ".flac": "audio", ".pdf": "document"}[ext]
		if kind != want {
			t.Errorf("MediaKind(%s) = %q, want %q", p, kind, want)
		}
	}

	tests := []struct {
		text string
		want []string
	}{
		{"", nil},
		{"no paths here", nil},
		{"every class: " + file("f.jpg") + " " + file("f.mp4") + " " + file("f.mp3") + " " + file("f.pdf"),
			[]string{file("f.jpg"), file("f.mp4"), file("f.mp3"), file("f.pdf")}},
		{"all images\n" + file("f.jpeg") + "\n" + file("f.png") + "\n" + file("f.gif") + "\n" + file("f.webp"),
			[]string{file("f.jpeg"), file("f.png"), file("f.gif"), file("f.webp")}},
		{file("f.mov") + file("f.avi"), nil}, // one token, no such file
		{file("f.mov") + "\t" + file("f.avi") + " " + file("f.mkv") + " " + file("f.webm"),
			[]string{file("f.mov"), file("f.avi"), file("f.mkv"), file("f.webm")}},
		{file("f.ogg") + " " + file("f.m4a") + " " + file("f.wav") + " " + file("f.flac"),
			[]string{file("f.ogg"), file("f.m4a"), file("f.wav"), file("f.flac")}},
		{"upper case " + file("f.PNG") + ", " + file("f.Pdf") + ".", []string{file("f.PNG"), file("f.Pdf")}},
		{"missing " + file("missing.png") + " " + file("missing.pdf"), nil},
		{"not media " + file("notes.txt") + " " + file("archive.zip") + " " + file("noext"), nil},
		{"a directory " + file("dir.png"), nil},
		{"punctuation: (" + file("f.jpg") + "), \"" + file("f.png") + "\"; '" + file("f.gif") + "'! [" + file("f.webp") + "]?",
			[]string{file("f.jpg"), file("f.png"), file("f.gif"), file("f.webp")}},
		{"markdown ![chart](" + file("f.png") + ") and <" + file("f.pdf") + ">", []string{file("f.png"), file("f.pdf")}},
		{"saved:" + file("f.jpg") + " out=" + file("f.mp4"), []string{file("f.jpg"), file("f.mp4")}},
		{"twice " + file("f.jpg") + " " + file("f.jpg") + " " + dir + "/./f.jpg", []string{file("f.jpg")}},
		{"relative f.jpg ./f.png", nil},
		{"url https://example.com" + file("f.jpg") + " file://" + file("f.png"), nil},
		{"word" + file("f.jpg"), nil},
	}
	for _, tt := range tests {
		if got := DetectMedia(tt.text); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("DetectMedia(%q)\n got %v\nwant %v", tt.text, got, tt.want)
		}
	}
}

func TestMergeEnv(t *testing.T) {
	t.Parallel()
	parent := []string{"A=1", "B=2", "C=x=y", "B=dup"}
	got := mergeEnv(parent, map[string]string{"B": "new", "D": ""})
	want := []string{"A=1", "C=x=y", "B=new", "D="}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("mergeEnv = %v, want %v", got, want)
	}
	if got := mergeEnv(parent, nil); !reflect.DeepEqual(got, parent) {
		t.Fatalf("mergeEnv without extra = %v", got)
	}
}
