package secretfile

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestWriteNewThenRead(t *testing.T) {
	path := filepath.Join(t.TempDir(), "secret")
	if err := WriteNew(path, []byte("s3cret\n")); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("written with mode %v (%v), want 0600", fi.Mode().Perm(), err)
	}
	if err := WriteNew(path, []byte("other")); !errors.Is(err, fs.ErrExist) {
		t.Fatalf("second write: %v, want fs.ErrExist", err)
	}
	data, err := Read(path, 64)
	if err != nil || string(data) != "s3cret\n" {
		t.Fatalf("Read: %q %v", data, err)
	}
	if leftovers, _ := filepath.Glob(filepath.Join(filepath.Dir(path), ".*.tmp")); len(leftovers) != 0 {
		t.Fatalf("temporary files left: %v", leftovers)
	}
}

func TestReadRefuses(t *testing.T) {
	dir := t.TempDir()
	open := filepath.Join(dir, "open")
	os.WriteFile(open, []byte("x"), 0o644)
	var se *Error
	if _, err := Read(open, 64); !errors.Is(err, ErrInsecure) || !errors.As(err, &se) || se.Mode != 0o644 || !strings.Contains(err.Error(), "0644") {
		t.Fatalf("0644 file: %v", err)
	}
	big := filepath.Join(dir, "big")
	os.WriteFile(big, make([]byte, 100), 0o600)
	if _, err := Read(big, 64); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("oversized file: %v", err)
	}
	if _, err := Read(dir, 64); !errors.Is(err, ErrNotRegular) {
		t.Fatalf("directory: %v", err)
	}
	if _, err := Read(filepath.Join(dir, "none"), 64); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("missing file: %v", err)
	}
}
