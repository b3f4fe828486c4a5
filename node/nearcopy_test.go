package node

import (
	"context"
	"fmt"
	mrand "math/rand"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/cmbnode/cmbnode/cmb"
	"github.com/cmbnode/cmbnode/internal/benchtext"
	"github.com/cmbnode/cmbnode/node/svaf"
)

// nearCopyEdits are the small edits that leave a record a near-copy of
// the one it was made from: what the nearest anchors are there to catch.
var nearCopyEdits = []struct {
	name string
	edit func(r *mrand.Rand, f *[cmb.NumFields]string, vocab []string)
}{
	{"word-added", func(r *mrand.Rand, f *[cmb.NumFields]string, vocab []string) {
		i := r.Intn(cmb.NumFields)
		w := strings.Fields(f[i])
		at := 1 + r.Intn(len(w))
		f[i] = strings.Join(append(w[:at:at], append([]string{vocab[r.Intn(len(vocab))]}, w[at:]...)...), " ")
	}},
	{"word-changed", func(r *mrand.Rand, f *[cmb.NumFields]string, vocab []string) {
		i := r.Intn(cmb.NumFields)
		w := strings.Fields(f[i])
		w[1+r.Intn(len(w)-1)] = vocab[r.Intn(len(vocab))]
		f[i] = strings.Join(w, " ")
	}},
	{"punctuation", func(r *mrand.Rand, f *[cmb.NumFields]string, vocab []string) {
		for range 2 {
			i := r.Intn(cmb.NumFields)
			w := strings.Fields(f[i])
			for k := 1 + r.Intn(4); k < len(w)-1; k += 5 + r.Intn(5) {
				w[k] += ","
			}
			f[i] = strings.Join(w, " ") + "."
		}
	}},
	{"field-dropped", func(r *mrand.Rand, f *[cmb.NumFields]string, vocab []string) {
		f[r.Intn(cmb.NumFields)] = ""
	}},
}

// TestNearCopiesFound is the yardstick of the nearest anchors: in a memory
// of 3,500 standard records (seven 300-byte fields of Zipf-drawn words,
// received over six minutes), a near-copy of a record from 100, 1,000 or
// 3,000 records back (far beyond the 5 recent anchors) — a word added, a
// word changed, punctuation, a field dropped — is judged redundant of
// that very record, and new records of the same words are not redundant.
// It runs on records numbered as the benchmarks make them ("focus 12:",
// a term no other record holds) and on records headed by the field's name
// alone, where only the words tell the copy's original.
func TestNearCopiesFound(t *testing.T) {
	if testing.Short() {
		t.Skip("3,500 records twice")
	}
	for _, numbered := range []bool{true, false} {
		t.Run(fmt.Sprintf("numbered=%t", numbered), func(t *testing.T) { nearCopies(t, numbered) })
	}
}

func nearCopies(t *testing.T, numbered bool) {
	ctx := context.Background()
	base := time.UnixMilli(1_751_000_000_000)
	var ms atomic.Int64
	now := func() time.Time { return base.Add(time.Duration(ms.Load()) * time.Millisecond) }
	aliceID, bob, src := seededReceiver(t, now)
	r := mrand.New(mrand.NewSource(11))
	vocab := benchtext.Vocab(r, 4096)
	z := mrand.NewZipf(r, 1.1, 1, uint64(len(vocab)-1))
	record := func(i int) (f [cmb.NumFields]string) {
		for j := range f {
			head := cmb.FieldNames[j] + ":"
			if numbered {
				head = fmt.Sprintf("%s %d:", cmb.FieldNames[j], i)
			}
			f[j] = benchtext.Field(head, 300, vocab, z)
		}
		return f
	}
	build := func(texts [cmb.NumFields]string) *cmb.Record {
		var f cmb.Fields
		for j := range f {
			f[j].Text = texts[j]
		}
		rec, err := cmb.Build(cmb.Draft{Fields: f, Group: "alpha", CreatedBy: aliceID.NodeID, CreatedAt: now().UnixMilli()}, aliceID.Ed25519)
		if err != nil {
			t.Fatal(err)
		}
		return rec
	}
	const memory = 3500
	texts := make([][cmb.NumFields]string, memory)
	keys := make([]string, memory)
	for i := range memory {
		ms.Add(100)
		texts[i] = record(i)
		rec := build(texts[i])
		c, err := bob.Check(ctx, rec, src)
		if err == nil {
			_, err = bob.Accept(ctx, c)
		}
		if err != nil {
			t.Fatal(err)
		}
		keys[i] = rec.Key
	}
	ms.Add(1000)

	// Each probe is judged alone, not stored: every one meets the same
	// memory.
	type tally struct{ found, wrong, missed int }
	byDistance := map[int]*tally{}
	var total tally
	for _, back := range []int{100, 1000, 3000} {
		byDistance[back] = &tally{}
		for k, e := range nearCopyEdits {
			for j := range 6 {
				o := memory - back - 7*k - j
				for !bob.isAnchor(keys[o]) {
					o-- // a copy of a record outside the memory is no copy
				}
				f := texts[o]
				e.edit(r, &f, vocab)
				v, _, err := bob.judge(ctx, build(f))
				if err != nil {
					t.Fatal(err)
				}
				c := byDistance[back]
				switch {
				case v.Decision == svaf.Redundant && v.Nearest == keys[o]:
					c.found++
				case v.Decision == svaf.Redundant:
					c.wrong++
					t.Errorf("%s of record %d back: redundant of %s, not of its original %s", e.name, memory-o, v.Nearest, keys[o])
				default:
					c.missed++
					t.Errorf("%s of record %d back: %s (drift %.3f), not redundant", e.name, memory-o, v.Decision, v.Drift)
				}
			}
		}
		c := byDistance[back]
		total.found, total.wrong, total.missed = total.found+c.found, total.wrong+c.wrong, total.missed+c.missed
		t.Logf("%d back: %d found, %d wrong nearest, %d missed", back, c.found, c.wrong, c.missed)
	}
	falseRedundant := 0
	const fresh = 60
	for i := range fresh {
		v, _, err := bob.judge(ctx, build(record(memory+i)))
		if err != nil {
			t.Fatal(err)
		}
		if v.Decision == svaf.Redundant {
			falseRedundant++
			t.Errorf("new record %d: redundant of %s", i, v.Nearest)
		}
	}
	t.Logf("near-copies: %d found, %d wrong nearest, %d missed; new records: %d of %d redundant", total.found, total.wrong, total.missed, falseRedundant, fresh)
}

// A lookup that waits on another's first fill of a group's table, and
// sees that fill fail, reads the store itself: it never gets the failed
// fill's part-filled table (which no later store adds to).
func TestNearGroupWaiterOfFailedFill(t *testing.T) {
	ctx := context.Background()
	base := time.UnixMilli(1_751_000_000_000)
	var ms atomic.Int64
	now := func() time.Time { return base.Add(time.Duration(ms.Load()) * time.Millisecond) }
	aliceID, bob, src := seededReceiver(t, now)
	const stored = 5
	for i := range stored {
		ms.Add(100)
		var f cmb.Fields
		f[cmb.Focus].Text = fmt.Sprintf("record %d of the failed fill test", i)
		rec, err := cmb.Build(cmb.Draft{Fields: f, Group: "alpha", CreatedBy: aliceID.NodeID, CreatedAt: now().UnixMilli()}, aliceID.Ed25519)
		if err != nil {
			t.Fatal(err)
		}
		c, err := bob.Check(ctx, rec, src)
		if err == nil {
			_, err = bob.Accept(ctx, c)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	x := &bob.adm.near
	// As after a restart, with a first fill under way that will fail.
	filling := newNearGroup()
	filling.ready = make(chan struct{})
	x.mu.Lock()
	x.groups = map[string]*nearGroup{"alpha": filling}
	x.mu.Unlock()

	type result struct {
		g   *nearGroup
		err error
	}
	got := make(chan result, 1)
	synctest.Test(t, func(t *testing.T) {
		ready := make(chan struct{}) // the bubble's, so the waiter's wait on it is seen
		filling.ready = ready
		go func() {
			g, err := x.group(ctx, bob.adm.hashed, bob.st, "alpha")
			got <- result{g, err}
		}()
		synctest.Wait() // the lookup waits on the fill
		// The filler's way out on failure (fillGroup).
		x.mu.Lock()
		delete(x.groups, "alpha")
		x.mu.Unlock()
		filling.failed = true
		close(ready)
	})
	r := <-got
	if r.err != nil {
		t.Fatal(r.err)
	}
	if r.g == filling {
		t.Fatal("the waiter got the failed fill's table")
	}
	if r.g.n != stored {
		t.Fatalf("the waiter's table holds %d records, want the %d stored", r.g.n, stored)
	}
}

// refNearGroup is nearGroup's table as a map of band keys to chain heads,
// the reference bandHeads must agree with.
type refNearGroup struct {
	sigs  []nearSig
	keys  []string
	next  [][nearBands]int32
	heads map[uint64]int32
}

func (r *refNearGroup) add(key string, sig nearSig) {
	e := int32(len(r.sigs))
	r.sigs, r.keys = append(r.sigs, sig), append(r.keys, key)
	var next [nearBands]int32
	for b := range nearBands {
		k := sig.band(b)
		next[b] = r.heads[k]
		r.heads[k] = e + 1
	}
	r.next = append(r.next, next)
}

func (r *refNearGroup) lookup(sig *nearSig) []string {
	var out []string
	for b := range nearBands {
		e := r.heads[sig.band(b)]
		for n := 0; e != 0 && n < nearChain; n++ {
			en := e - 1
			e = r.next[en][b]
			if slices.Contains(out, r.keys[en]) || agree(sig, &r.sigs[en]) < nearAgree {
				continue
			}
			out = append(out, r.keys[en])
		}
	}
	return out
}

// TestBandHeadsAsMap: a group's open-addressed band tables find the very
// chains a map of the full band keys does, through growth, chains longer
// than nearChain, records whose bands are all shared, and band keys of
// equal fingerprints (low 32 bits), told apart by their entries; a key
// held already is not added again.
func TestBandHeadsAsMap(t *testing.T) {
	r := mrand.New(mrand.NewSource(7))
	randSig := func() nearSig {
		var s nearSig
		for i := range s {
			s[i] = r.Uint32()
		}
		return s
	}
	// Two signatures whose band 0 keys differ but share their low 32 bits.
	var collide [2]nearSig
	seen := map[uint32]nearSig{}
	for found := false; !found; {
		s := randSig()
		k := s.band(0)
		if o, ok := seen[uint32(k)]; ok && o.band(0) != k {
			collide, found = [2]nearSig{o, s}, true
		}
		seen[uint32(k)] = s
	}
	if collide[0].band(0) == collide[1].band(0) || uint32(collide[0].band(0)) != uint32(collide[1].band(0)) {
		t.Fatal("no fingerprint collision made")
	}
	// A pool of bases, each copied with some bands kept: chains of shared
	// keys, some far longer than nearChain.
	bases := []nearSig{collide[0], collide[1]}
	for range 40 {
		bases = append(bases, randSig())
	}
	g := newNearGroup()
	ref := &refNearGroup{heads: map[uint64]int32{}}
	var probes []nearSig
	for i := range 6000 {
		s := bases[r.Intn(len(bases))]
		if i%3 == 0 {
			s = collide[r.Intn(2)]
		}
		switch r.Intn(5) {
		case 0: // a new record
			s = randSig()
		case 1: // a near-copy: one band changed
			b := r.Intn(nearBands)
			s[b*nearRows+r.Intn(nearRows)] = r.Uint32()
		case 2: // half its bands changed: shares bands, fails to agree
			for b := 0; b < nearBands; b += 2 {
				s[b*nearRows] = r.Uint32()
			}
		case 3: // a bin changed in every band but the first: found by it alone
			for b := 1; b < nearBands; b++ {
				s[b*nearRows+r.Intn(nearRows)] = r.Uint32()
			}
		}
		// Band 0 of either colliding base on every copy of them.
		if i%7 == 0 {
			copy(s[:nearRows], collide[i%2][:nearRows])
		}
		key := fmt.Sprintf("k%05d", i)
		g.addLocked(key, int64(i), &s)
		ref.add(key, s)
		if i%50 == 0 {
			probes = append(probes, s)
		}
	}
	// A key held already is not added again, whatever its signature.
	held := g.n
	for i := 0; i < 6000; i += 97 {
		s := randSig()
		g.addLocked(fmt.Sprintf("k%05d", i), int64(i), &s)
	}
	if g.n != held {
		t.Fatalf("%d entries after adding held keys again, want %d", g.n, held)
	}
	probes = append(probes, collide[0], collide[1], randSig())
	for range 20 {
		p := collide[r.Intn(2)]
		for b := 1; b < nearBands; b++ {
			p[b*nearRows+r.Intn(nearRows)] = r.Uint32()
		}
		probes = append(probes, p)
	}
	var x nearIndex
	for _, p := range probes {
		want := ref.lookup(&p)
		var got []string
		for _, c := range x.lookup(g, &p, nil) {
			got = append(got, c.kt.Key)
		}
		slices.Sort(want)
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Fatalf("lookup found %v, the map of band keys %v", got, want)
		}
	}
	for b := range nearBands {
		if h := &g.heads[b]; 2*h.used > len(h.slots) {
			t.Fatalf("band %d: %d of %d slots used", b, h.used, len(h.slots))
		}
	}
}
