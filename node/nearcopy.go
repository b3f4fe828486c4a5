package node

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"slices"
	"sync"

	"github.com/cmbnode/cmbnode/cmb"
	"github.com/cmbnode/cmbnode/node/embed"
	"github.com/cmbnode/cmbnode/store"
)

// Near-copies (the nearest anchors of SVAF admission, admission.go).
//
// A record is redundant when every evaluable field is within SVAF's
// redundancy threshold of an anchor's (cosine of their hashed n-gram
// counts above 0.9): a near-copy, whose fields keep nearly all their words
// in order. The nearest anchors exist to find such a copy of any older
// memory, not only of the few recent ones, so they are found by MinHash
// locality-sensitive hashing over the record's word pairs, not by a text
// search:
//
//   - a record's shingles are its evaluable fields' consecutive word pairs,
//     each tagged with its field (a field of one word is that word), words
//     as the hashed kernel reads them (embed.Hashed.AppendWords), so
//     punctuation, case and spacing change none;
//   - its signature is nearBins minima of one hash of those shingles,
//     each shingle going to one bin by the hash's top bits (one-permutation
//     MinHash), an empty bin filled from the next full one; two records'
//     bins agree with probability their shingle sets' Jaccard similarity;
//   - the signature's nearBands bands of nearRows bins are looked up in a
//     table per group: a record sharing a band is a candidate, kept when
//     at least nearAgree of all bins agree.
//
// A near-copy keeps its shingles' Jaccard similarity high (a word added or
// changed in one of seven 45-word fields: 0.98; a field dropped: 0.86),
// while two unrelated records of the benchmarks' Zipf-drawn words share
// about 3 % (at most 6 % of 80,000 pairs): a band is shared with
// probability J⁴, so a copy at J = 0.86 shares one of 12 with probability
// 0.9999 and at J = 0.7 with 0.96, and an unrelated record at J = 0.06 with
// 1.6e-4. Words merely reordered keep the counts and not the pairs: such a
// copy is found only among the recent anchors.
//
// The table holds every record stored in the group since it was first
// looked up (keepEntry adds them) and, read on that first lookup, those
// stored before: lookups are the same whatever the node judged before. A
// record forgotten, purged or quarantined since stays in it; a candidate
// is an anchor only if it is one (isAnchor) and still stored.
const (
	nearBands = 12
	nearRows  = 4
	nearBins  = nearBands * nearRows
	// nearAgree of nearBins bins agreeing is a Jaccard similarity of about
	// 0.5 or more: below any near-copy's, far above unrelated records'.
	nearAgree = nearBins / 2
	// nearChain bounds the records one band's lookup reads, newest first:
	// records of identical bands (a group of one-word records) would
	// otherwise make it a scan of all of them.
	nearChain = 64
)

// nearSig is a record's MinHash signature.
type nearSig [nearBins]uint32

// mix64 is splitmix64's finaliser: a bijection whose every output bit
// depends on every input bit.
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ x>>31
}

// nearSignature is the signature of texts' evaluable fields (words made
// in buf, returned for reuse); ok is false when they have no word.
func nearSignature(h embed.Hashed, texts *[cmb.NumFields]string, buf []uint64) (sig nearSig, ok bool, _ []uint64) {
	var s nearSigner
	s.init()
	for f := range texts {
		t, evaluable := evaluableText(texts[f])
		if !evaluable {
			continue
		}
		buf = h.AppendWords(buf[:0], t)
		s.addField(f, buf)
	}
	sig, ok = s.finish()
	return sig, ok, buf
}

// nearSigner makes a signature field by field: a bin's minimum does not
// depend on the order its shingles come in, so the fields may be added in
// any order (hashFields adds them in name order).
type nearSigner struct {
	sig nearSig
	ok  bool // a shingle was added
}

func (s *nearSigner) init() {
	for i := range s.sig {
		s.sig[i] = math.MaxUint32
	}
	s.ok = false
}

// addField adds the shingles of field f (an index in cmb.FieldNames),
// whose words' hashes are words.
func (s *nearSigner) addField(f int, words []uint64) {
	tag := uint64(f+1) * 0x9e3779b97f4a7c15
	if len(words) == 1 {
		s.add(words[0] ^ tag)
	}
	for k := 1; k < len(words); k++ {
		s.add((words[k-1]*fnvPrime ^ words[k]) + tag)
	}
}

func (s *nearSigner) add(x uint64) {
	x = mix64(x)
	b, _ := bits.Mul64(x, nearBins) // the top bits pick the bin
	s.sig[b] = min(s.sig[b], uint32(x))
	s.ok = true
}

// finish is the signature; ok is false when no shingle was added.
func (s *nearSigner) finish() (sig nearSig, ok bool) {
	sig = s.sig
	if !s.ok {
		return sig, false
	}
	// An empty bin takes the next full one's minimum, mixed with the
	// distance, so two records' empty bins agree as often as full ones.
	for i := range sig {
		if sig[i] != math.MaxUint32 {
			continue
		}
		for d := 1; ; d++ {
			if v := sig[(i+d)%nearBins]; v != math.MaxUint32 {
				sig[i] = uint32(mix64(uint64(v)<<8 | uint64(d)))
				break
			}
		}
	}
	return sig, true
}

// fnvPrime combines a word pair's hashes in order.
const fnvPrime = 1099511628211

// band is the table key of sig's band b.
func (sig *nearSig) band(b int) uint64 {
	r := sig[b*nearRows : (b+1)*nearRows]
	x := uint64(b)
	for _, v := range r {
		x = mix64(x ^ uint64(v))
	}
	return x
}

// agree is how many bins of a and b agree.
func agree(a, b *nearSig) int {
	n := 0
	for i := range a {
		if a[i] == b[i] {
			n++
		}
	}
	return n
}

// nearIndex holds the signatures of each group's records.
type nearIndex struct {
	mu     sync.RWMutex
	groups map[string]*nearGroup
	// judged are the signatures of records judged and not yet stored, by
	// key, so storing one does not make its signature again. A key names
	// its texts, so a signature kept under it is always its record's. A
	// judged record may never be stored: past nearJudged they are dropped.
	judged map[string]nearSig
}

// nearJudged bounds nearIndex.judged: more than the records judged at once.
const nearJudged = 256

// nearGroup is one group's table. Entry e's chain link in band b is
// entry(e).next[b]: the entry added before it with the same band key, plus
// one (0 ends the chain); heads[b] holds each of band b's keys' newest
// entry plus one. Entries are held in chunks of nearChunk: a table of many
// records grows by one chunk, not by copying all of it, and holds at most
// one chunk's room it does not use; the first chunk grows as a slice does,
// so a group of few records takes room for about those.
type nearGroup struct {
	ready  chan struct{}       // closed once the records stored before are in, or failed to be
	failed bool                // they are not all in; set before ready is closed
	chunks [][]nearEntry       // nearChunk entries each, but the last
	n      int32               // entries added
	held   map[string]struct{} // the keys of its entries
	heads  [nearBands]bandHeads
}

func newNearGroup() *nearGroup { return &nearGroup{held: map[string]struct{}{}} }

// bandHeads maps one band's keys to the newest entry of each, plus one, by
// open addressing with linear probing: a lookup of an absent key, the
// common case, reads one or two adjacent slots, where a map's buckets of a
// table this size are a cache miss each. A slot is a key's low 32 bits
// (its fingerprint, which also places it) over its head; 0 is empty (a
// head is never 0). A fingerprint is not the key: a slot whose fingerprint
// matches is the key's only if its head entry's band is the key, which
// holds for every entry of a chain, so a lookup finds exactly the chain a
// map of the full keys would. At most half the slots are used.
type bandHeads struct {
	slots []uint64
	used  int
}

// find returns the slot of band b's key in g's table of that band (t), or
// the empty slot where it would go; head is the key's head, 0 if absent.
func (t *bandHeads) find(g *nearGroup, b int, key uint64) (slot int, head int32) {
	i := t.home(key)
	return t.findFrom(g, b, key, i, t.slots[i])
}

// home is the slot a probe for key starts at.
func (t *bandHeads) home(key uint64) int { return int(uint32(key)) & (len(t.slots) - 1) }

// findFrom is find given the probe's first slot, i (home's), and what it
// holds, s: a caller may read several tables' first slots before it
// looks at any.
func (t *bandHeads) findFrom(g *nearGroup, b int, key uint64, i int, s uint64) (slot int, head int32) {
	mask := len(t.slots) - 1
	fp := uint32(key)
	for {
		if s == 0 {
			return i, 0
		}
		if uint32(s>>32) == fp {
			if h := int32(uint32(s)); g.entry(h-1).sig.band(b) == key {
				return i, h
			}
		}
		i = (i + 1) & mask
		s = t.slots[i]
	}
}

// reserve makes room in t for one more key.
func (t *bandHeads) reserve() {
	if 2*(t.used+1) > len(t.slots) {
		t.grow()
	}
}

// push makes head the newest entry (plus one) of band b's key and
// returns the one it replaces (0: none). t has room for the key
// (reserve); i is its home slot and s what that holds (findFrom).
func (t *bandHeads) push(g *nearGroup, b int, key uint64, head int32, i int, s uint64) (prev int32) {
	i, prev = t.findFrom(g, b, key, i, s)
	if prev == 0 {
		t.used++
	}
	t.slots[i] = uint64(uint32(key))<<32 | uint64(uint32(head))
	return prev
}

// grow doubles the slots: a slot's place is its fingerprint's, so it is
// moved without reading its entry.
func (t *bandHeads) grow() {
	old := t.slots
	t.slots = make([]uint64, max(8, 2*len(old)))
	mask := len(t.slots) - 1
	for _, s := range old {
		if s == 0 {
			continue
		}
		i := int(uint32(s>>32)) & mask
		for t.slots[i] != 0 {
			i = (i + 1) & mask
		}
		t.slots[i] = s
	}
}

// nearEntry is one record in its group's table: what lookup reads of a
// candidate, together.
type nearEntry struct {
	sig  nearSig
	next [nearBands]int32
	at   int64
	key  string
}

// nearChunk is the entries of one chunk: 270 KB.
const nearChunk = 1024

func (g *nearGroup) entry(e int32) *nearEntry { return &g.chunks[e/nearChunk][e%nearChunk] }

// nearCandidate is a record sharing a band with the looked-up one.
type nearCandidate struct {
	kt    store.KeyTime
	agree int
}

// addLocked adds key's signature to g unless it holds key.
func (g *nearGroup) addLocked(key string, at int64, sig *nearSig) {
	// One map operation: the key is held already if adding it leaves the
	// count as it was.
	held := len(g.held)
	if g.held[key] = struct{}{}; len(g.held) == held {
		return
	}
	e := g.n
	switch {
	case e == 0:
		g.chunks = [][]nearEntry{nil}
	case e%nearChunk == 0:
		g.chunks = append(g.chunks, make([]nearEntry, 0, nearChunk))
	}
	last := &g.chunks[len(g.chunks)-1]
	*last = append(*last, nearEntry{sig: *sig, at: at, key: key})
	g.n++
	en := g.entry(e)
	// Every band's table has room made and its home slot read before any
	// is probed, as lookup reads them: the reads, a cache miss each in a
	// big group, are under way at once. A band's slots change only in its
	// own push, so what was read of them holds until then.
	var keys [nearBands]uint64
	var home [nearBands]int
	var first [nearBands]uint64
	for b := range keys {
		keys[b] = sig.band(b)
		t := &g.heads[b]
		t.reserve()
		home[b] = t.home(keys[b])
		first[b] = t.slots[home[b]]
	}
	for b := range en.next {
		en.next[b] = g.heads[b].push(g, b, keys[b], e+1, home[b], first[b])
	}
}

// judgedSig keeps sig, of the judged record key, for its add.
func (x *nearIndex) judgedSig(key string, sig *nearSig) {
	x.mu.Lock()
	if x.judged == nil || len(x.judged) >= nearJudged {
		x.judged = make(map[string]nearSig, nearJudged)
	}
	x.judged[key] = *sig
	x.mu.Unlock()
}

// add puts a stored record of group into its table, when the group has
// one (a group never looked up is read whole at its first lookup).
func (x *nearIndex) add(h embed.Hashed, key, group string, at int64, texts *[cmb.NumFields]string) {
	x.mu.Lock()
	sig, judged := x.judged[key]
	delete(x.judged, key)
	g := x.groups[group]
	if g != nil && judged {
		g.addLocked(key, at, &sig) // unless g holds key
		x.mu.Unlock()
		return
	}
	held := g == nil
	if !held {
		_, held = g.held[key]
	}
	x.mu.Unlock()
	if held {
		return
	}
	sig, ok, _ := nearSignature(h, texts, nil)
	if !ok {
		return
	}
	x.mu.Lock()
	g.addLocked(key, at, &sig)
	x.mu.Unlock()
}

// group returns group's table, made on the first call from the records
// stored in it (read through st): every later store adds to it itself.
func (x *nearIndex) group(ctx context.Context, h embed.Hashed, st *store.Store, group string) (*nearGroup, error) {
	for {
		x.mu.RLock()
		g, found := x.groups[group]
		x.mu.RUnlock()
		if !found {
			x.mu.Lock()
			if x.groups == nil {
				x.groups = map[string]*nearGroup{}
			}
			if g, found = x.groups[group]; !found {
				// Made and visible before the store is read: a record stored
				// from now on is added by keepEntry, one stored before is read
				// below.
				g = newNearGroup()
				g.ready = make(chan struct{})
				x.groups[group] = g
			}
			x.mu.Unlock()
			if !found {
				return x.fillGroup(ctx, h, st, g, group)
			}
		}
		select {
		case <-g.ready:
			// A fill that failed left g part-filled and out of x.groups:
			// its waiters never use it, they read the store themselves.
			if !g.failed {
				return g, nil
			}
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// fillGroup fills g, just made for group, and releases its waiters.
func (x *nearIndex) fillGroup(ctx context.Context, h embed.Hashed, st *store.Store, g *nearGroup, group string) (*nearGroup, error) {
	defer close(g.ready)
	if err := x.fill(ctx, h, st, g, group); err != nil {
		// The next lookup reads the store again.
		x.mu.Lock()
		delete(x.groups, group)
		x.mu.Unlock()
		g.failed = true
		return nil, fmt.Errorf("reading group %q's records for near-copy lookups: %w", group, err)
	}
	return g, nil
}

// fill reads into g the records stored in group, oldest first.
func (x *nearIndex) fill(ctx context.Context, h embed.Hashed, st *store.Store, g *nearGroup, group string) error {
	var kts []store.KeyTime
	if err := st.Scan(ctx, store.Window{Group: group}, func(kt store.KeyTime) error {
		kts = append(kts, kt)
		return nil
	}); err != nil {
		return err
	}
	var buf []uint64
	for _, kt := range kts {
		x.mu.RLock()
		_, held := g.held[kt.Key]
		x.mu.RUnlock()
		if held {
			continue
		}
		r, err := st.GetLineage(ctx, kt.Key)
		if errors.Is(err, store.ErrNotFound) {
			continue // forgotten or purged since the scan
		}
		if err != nil {
			return fmt.Errorf("near-copy signature of %s: %w", kt.Key, err)
		}
		var sig nearSig
		var ok bool
		sig, ok, buf = nearSignature(h, &r.Texts, buf)
		if !ok {
			continue
		}
		x.mu.Lock()
		g.addLocked(kt.Key, kt.CreatedAt, &sig)
		x.mu.Unlock()
	}
	return nil
}

// lookup returns the records of g at least nearAgree of whose bins agree
// with sig, most agreeing first, then newest, then by key.
func (x *nearIndex) lookup(g *nearGroup, sig *nearSig, out []nearCandidate) []nearCandidate {
	out = out[:0]
	x.mu.RLock()
	defer x.mu.RUnlock()
	// Every band's head first, and of those every band's first slot
	// before any is looked at: the tables' reads, a cache miss each in a
	// big group, are all under way at once, and do not wait on one
	// another's probes or on the chains.
	var keys [nearBands]uint64
	for b := range keys {
		keys[b] = sig.band(b)
	}
	var home [nearBands]int
	var first [nearBands]uint64
	for b := range keys {
		if t := &g.heads[b]; t.used > 0 {
			home[b] = t.home(keys[b])
			first[b] = t.slots[home[b]]
		}
	}
	var heads [nearBands]int32
	for b := range heads {
		if t := &g.heads[b]; t.used > 0 {
			_, heads[b] = t.findFrom(g, b, keys[b], home[b], first[b])
		}
	}
	for b, e := range heads {
		for n := 0; e != 0 && n < nearChain; n++ {
			en := g.entry(e - 1)
			e = en.next[b]
			if slices.ContainsFunc(out, func(c nearCandidate) bool { return c.kt.Key == en.key }) {
				continue
			}
			if a := agree(sig, &en.sig); a >= nearAgree {
				out = append(out, nearCandidate{kt: store.KeyTime{Key: en.key, CreatedAt: en.at}, agree: a})
			}
		}
	}
	slices.SortFunc(out, func(a, b nearCandidate) int {
		return cmp.Or(cmp.Compare(b.agree, a.agree), cmp.Compare(b.kt.CreatedAt, a.kt.CreatedAt), cmp.Compare(a.kt.Key, b.kt.Key))
	})
	return out
}
