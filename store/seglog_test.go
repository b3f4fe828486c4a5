package store

import (
	"bytes"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"unsafe"
)

// The zeros a segment grows by are walGrow bytes at a walAlign boundary,
// all zero, and a direct write of them leaves zeros on disk.
func TestDirectZerosGrowASegment(t *testing.T) {
	zero, release := directZeros()
	defer release()
	if len(zero) != walGrow {
		t.Fatalf("%d zero bytes, want %d", len(zero), walGrow)
	}
	if p := uintptr(unsafe.Pointer(&zero[0])); p%walAlign != 0 {
		t.Fatalf("zeros at %#x, not on a %d-byte boundary", p, walAlign)
	}
	if i := bytes.IndexFunc(zero, func(r rune) bool { return r != 0 }); i >= 0 {
		t.Fatalf("byte %d of the zeros is not zero", i)
	}
	path := filepath.Join(t.TempDir(), "seg")
	if err := os.WriteFile(path, bytes.Repeat([]byte{0xff}, walGrow), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(path, os.O_RDWR|syscall.O_DIRECT|syscall.O_DSYNC, 0)
	if err != nil {
		t.Skipf("no direct writes here: %v", err)
	}
	defer f.Close()
	if n, err := f.WriteAt(zero, 0); err != nil || n != walGrow {
		t.Fatalf("direct write of the zeros: %d bytes, %v", n, err)
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, make([]byte, walGrow)) {
		t.Fatal("the segment does not read back as zeros")
	}
}
