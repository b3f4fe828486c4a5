package store

import (
	"context"
	"encoding/binary"
	"fmt"
	"strings"
	"testing"
)

// TestRecordTextsAreStoredOnce: a text whose bytes are in the record's JSON
// is written as a reference to them, others in full, and all decode to
// what was stored; a record of the layout before (every text in full)
// still decodes.
func TestRecordTextsAreStoredOnce(t *testing.T) {
	long := strings.Repeat("the release ships on friday ", 11)
	e := mkEntry("codec", testBase, long, "short", `needs "escaping" in JSON`, long+" sealed, not in raw")
	e.Raw = []byte(fmt.Sprintf(`{"key":%q,"fields":{"focus":{"text":%q},"intent":{"text":"needs \"escaping\" in JSON"}}}`, e.Key, long))
	r := &Record{Entry: e, Meta: Meta{Source: "peer"}}
	v := encodeRecord(r)
	full := len(e.Raw)
	for _, t := range e.Texts {
		full += len(t)
	}
	if len(v) > full-len(long)+64 {
		t.Fatalf("%d bytes: the text in raw is written twice (%d with every text)", len(v), full)
	}
	got, err := decodeRecord(e.Key, v, true)
	if err != nil {
		t.Fatal(err)
	}
	if got.Texts != e.Texts || string(got.Raw) != string(e.Raw) || got.Meta.Source != "peer" {
		t.Fatalf("decoded %+v", got)
	}
	for cut := range len(v) - len(e.Raw) {
		if _, err := decodeRecord(e.Key, v[:cut], false); err == nil {
			t.Fatalf("a value cut at %d decodes", cut)
		}
	}

	// The layout before: format 1, every text length-prefixed in full.
	old := []byte{recFormat1, 0}
	old = binary.AppendVarint(old, 0)
	for _, s := range []string{"src", e.CreatedBy} {
		old = appendStr(old, s)
	}
	old = binary.AppendVarint(old, e.CreatedAt)
	old = appendStr(appendStr(old, e.Group), "")
	old = appendList(appendList(old, nil), nil)
	for _, t := range e.Texts {
		old = appendStr(old, t)
	}
	old = append(old, e.Raw...)
	got, err = decodeRecord(e.Key, old, true)
	if err != nil || got.Texts != e.Texts || string(got.Raw) != string(e.Raw) {
		t.Fatalf("format 1: %+v %v", got, err)
	}
}

// TestFormat3StoreIsUpgraded: a store of the format before opens, is
// marked with this one, and serves what it held.
func TestFormat3StoreIsUpgraded(t *testing.T) {
	dir := t.TempDir()
	s := openTest(t, dir)
	e := mkEntry("held", testBase, "kept across the upgrade")
	if _, err := s.PutMany(context.Background(), itemsOf([]Entry{e})); err != nil {
		t.Fatal(err)
	}
	s.Close()
	setFormat(t, dir, formatV3)
	s = openTest(t, dir)
	if _, err := s.Get(context.Background(), e.Key); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if f := readFormat(t, dir); f != formatVersion {
		t.Fatalf("marked %q after opening, want %q", f, formatVersion)
	}
}
