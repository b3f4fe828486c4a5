package store

import (
	"context"
	"testing"
)

// TestAnnexes: annexes survive a reopen, deletes take, namespaces do not
// mix, and Check ignores them.
func TestAnnexes(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.PutAnnexes(ctx, "svaf", []Annex{{Key: "k1", Value: []byte("a")}, {Key: "k2", Value: []byte("b")}}); err != nil {
		t.Fatal(err)
	}
	if err := s.PutAnnexes(ctx, "vec", []Annex{{Key: "k1", Value: []byte("v")}}); err != nil {
		t.Fatal(err)
	}
	if err := s.PutAnnexes(ctx, "svaf", []Annex{{Key: "k2"}}); err != nil {
		t.Fatal(err)
	}
	if err := s.Check(ctx); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if s, err = Open(dir, Options{}); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	got := map[string]string{}
	if err := s.ScanAnnexes(ctx, "svaf", func(k string, v []byte) error { got[k] = string(v); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got["k1"] != "a" {
		t.Fatalf("svaf annexes after reopen: %v", got)
	}
	if v, ok, err := s.GetAnnex(ctx, "vec", "k1"); err != nil || !ok || string(v) != "v" {
		t.Fatalf("vec annex: %q %t %v", v, ok, err)
	}
	if _, ok, _ := s.GetAnnex(ctx, "vec", "k2"); ok {
		t.Fatal("an annex never written was found")
	}
	if err := s.PutAnnexes(ctx, "bad\x00ns", []Annex{{Key: "k", Value: []byte{1}}}); err == nil {
		t.Fatal("a namespace with NUL was accepted")
	}
}
