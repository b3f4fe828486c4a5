package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/cmbnode/cmbnode/cmb"
	"github.com/cmbnode/cmbnode/node/embed"
	"github.com/cmbnode/cmbnode/node/svaf"
	"github.com/cmbnode/cmbnode/store"
)

// SVAF admission (MMP §9.2, docs/recall.md "SVAF admission").
//
// Every received broadcast record that passes Check is evaluated before it
// is stored, with svaf.Evaluate, against the node's anchors:
//
//   - anchors are the records that make up this node's memory as MMP would
//     hold it: those authored here, directed to us, admitted (aligned or
//     guarded), or held from before SVAF ran, but never a redundant or
//     rejected one, a quarantined one, or the incoming record itself (it is
//     not stored yet when it is judged);
//   - of those, the Recent most recent in the group (MMP's recentCMBs, the
//     reference takes 5) and up to Nearest near-copies of the incoming
//     record (nearcopy.go), so a near-copy of an older memory is found
//     redundant, not only of the last few; a record that copies none is
//     judged against the recent ones alone, as the reference judges all.
//
// Vectors are per field, from the configured encoder when its last call
// succeeded, it answers within EncoderTimeout and every anchor has its
// vectors in that kernel, else from
// the built-in hashed n-gram kernel for the incoming record and all anchors
// alike: one evaluation never mixes kernels.
//
// Nothing is deleted: the record is stored whatever the verdict, and the
// verdict is kept beside it (a store annex) with its drift and, when
// redundant, the anchor it duplicates. What is surfaced follows Surface;
// records without a verdict (local, directed, held from before) always are.

// SVAFOptions tune admission. The zero value is MMP's uniform profile with
// the reference's 5 recent anchors, 5 nearest, and every verdict but
// redundant surfaced.
type SVAFOptions struct {
	// Config holds the thresholds; zero is svaf.Default().
	Config svaf.Config
	// Recent and Nearest size the anchor set (0: 5 each; negative: none).
	Recent, Nearest int
	// Surface lists the verdicts whose broadcast records recall, CGP, MCP
	// and the recent listing show. nil is DefaultSurface; MMP §9.4's strict
	// reading is {aligned, guarded}.
	Surface []svaf.Decision
	// EncoderTimeout bounds the wait for the dense encoder's vectors of an
	// incoming record (0: 500 ms); on expiry the hashed kernel judges it,
	// and every record after it until the dense worker's next successful
	// encode (dense.go, denseIndex.healthy).
	EncoderTimeout time.Duration
}

// DefaultSurface shows every verdict except redundant: a near-copy is
// found through the memory it duplicates. A rejected record is only unlike
// the recent memory; a memory daemon keeps showing it.
var DefaultSurface = []svaf.Decision{svaf.Aligned, svaf.Guarded, svaf.Rejected}

// annexSVAF is the store namespace of verdicts.
const annexSVAF = "svaf"

// verdictRecord is a kept verdict, as stored in its annex.
type verdictRecord struct {
	Decision svaf.Decision `json:"decision"`
	Drift    float64       `json:"drift"`
	Nearest  string        `json:"nearest,omitempty"`
	Kernel   string        `json:"kernel"`
	At       int64         `json:"at"`
}

// admission holds the evaluator's settings and every kept verdict.
type admission struct {
	cfg             svaf.Config
	recent, nearest int
	surface         map[svaf.Decision]bool
	timeout         time.Duration
	hashed          embed.Hashed
	hashedID        string // hashed.Kernel().ID, made once

	vecs anchorVectors // hashed counts of anchors, by key
	near nearIndex     // the signatures near-copies are found by
	// works (*hashedWork) are judge's and evaluate's working memory,
	// recycled: at 512 dimensions about 75 KB and the anchors' vectors (the
	// record's seven fields dense and their readouts, 28 KB each; the
	// n-gram scratch, hashScratch, about 16 KB: the counts and each field's
	// nonzero buckets; the fields' anchor vectors), of which nothing
	// outlives a judgement.
	works sync.Pool

	mu       sync.RWMutex
	verdicts map[string]verdictRecord
	counts   map[svaf.Decision]int64 // verdicts reached since Open
}

func newAdmission(o SVAFOptions) (*admission, error) {
	a := &admission{cfg: o.Config, recent: o.Recent, nearest: o.Nearest, timeout: o.EncoderTimeout,
		hashed: embed.DefaultHashed(), surface: map[svaf.Decision]bool{}, verdicts: map[string]verdictRecord{}, counts: map[svaf.Decision]int64{}}
	a.hashedID = a.hashed.Kernel().ID
	if a.cfg.Freshness == 0 && a.cfg.Guarded == 0 {
		fw := a.cfg.FieldWeights
		a.cfg = svaf.Default()
		a.cfg.FieldWeights = fw
	}
	if err := a.cfg.Validate(); err != nil {
		return nil, err
	}
	if a.recent == 0 {
		a.recent = 5
	}
	if a.nearest == 0 {
		a.nearest = 5
	}
	a.recent, a.nearest = max(a.recent, 0), max(a.nearest, 0)
	if a.timeout <= 0 {
		a.timeout = 500 * time.Millisecond
	}
	s := o.Surface
	if s == nil {
		s = DefaultSurface
	}
	for _, d := range s {
		if !d.Valid() {
			return nil, fmt.Errorf("svaf surface: %q is not a decision", d)
		}
		a.surface[d] = true
	}
	return a, nil
}

// load reads the kept verdicts, dropping those whose record was purged.
func (n *Node) loadVerdicts(ctx context.Context) error {
	var gone []store.Annex
	err := n.st.ScanAnnexes(ctx, annexSVAF, func(key string, val []byte) error {
		var v verdictRecord
		if json.Unmarshal(val, &v) != nil || !v.Decision.Valid() {
			gone = append(gone, store.Annex{Key: key})
			return nil
		}
		n.adm.verdicts[key] = v
		return nil
	})
	if err != nil {
		return err
	}
	for k := range n.adm.verdicts {
		if ok, err := n.st.Has(ctx, k); err != nil {
			return err
		} else if !ok {
			delete(n.adm.verdicts, k)
			gone = append(gone, store.Annex{Key: k})
		}
	}
	return n.st.PutAnnexes(ctx, annexSVAF, gone)
}

// verdict returns key's kept verdict.
func (n *Node) verdict(key string) (verdictRecord, bool) {
	n.adm.mu.RLock()
	defer n.adm.mu.RUnlock()
	v, ok := n.adm.verdicts[key]
	return v, ok
}

// Hidden reports whether the surface policy hides key: it is a broadcast
// record whose verdict is not among SVAFOptions.Surface. Directed and local
// records carry no verdict and are never hidden.
func (n *Node) Hidden(key string) bool {
	v, ok := n.verdict(key)
	return ok && !n.adm.surface[v.Decision]
}

// Verdict is a record's SVAF outcome as adapters show it.
type Verdict struct {
	Decision string  `json:"decision"`
	Drift    float64 `json:"drift"`
	// Nearest is the anchor a redundant record duplicates.
	Nearest string `json:"nearest,omitempty"`
	Kernel  string `json:"kernel"`
	Hidden  bool   `json:"hidden"`
}

// VerdictOf returns key's SVAF verdict; ok is false for records SVAF did
// not judge (authored here, directed to us, held from before, duplicates).
func (n *Node) VerdictOf(key string) (Verdict, bool) {
	v, ok := n.verdict(key)
	if !ok {
		return Verdict{}, false
	}
	return Verdict{Decision: string(v.Decision), Drift: v.Drift, Nearest: v.Nearest, Kernel: v.Kernel, Hidden: !n.adm.surface[v.Decision]}, true
}

// isAnchor: an anchor is part of the node's memory as MMP would hold it:
// not quarantined, and admitted or never judged.
func (n *Node) isAnchor(key string) bool {
	if n.st.IsQuarantined(key) {
		return false
	}
	v, ok := n.verdict(key)
	return !ok || v.Decision.Admitted()
}

// fieldTexts are a record's evaluable field texts by name: MMP treats an
// absent or "neutral" field as non-evaluable.
func fieldTexts(texts [cmb.NumFields]string) map[string]string {
	ev, _ := evaluableFields(&texts)
	out := make(map[string]string, cmb.NumFields)
	for i, t := range ev {
		if t != "" {
			out[cmb.FieldNames[i]] = t
		}
	}
	return out
}

// evaluableFields are fieldTexts by field index, "" where a field is not
// evaluable (an evaluable text is never empty), and how many are.
func evaluableFields(texts *[cmb.NumFields]string) (ev [cmb.NumFields]string, n int) {
	for i := range texts {
		if t, ok := evaluableText(texts[i]); ok {
			ev[i] = t
			n++
		}
	}
	return ev, n
}

// recentAnchors are the Recent newest anchors of group, newest first.
func (n *Node) recentAnchors(ctx context.Context, group string) ([]store.KeyTime, error) {
	if n.adm.recent <= 0 {
		return nil, nil
	}
	out := make([]store.KeyTime, 0, n.adm.recent+n.adm.nearest)
	out, err := n.st.Newest(ctx, group, n.adm.recent, func(kt store.KeyTime) bool { return n.isAnchor(kt.Key) }, out)
	if err != nil {
		return nil, err
	}
	return out, nil
}

// nearAnchors appends to the recent anchors out up to Nearest near-copies
// (nearcopy.go) of the record whose signature is sig (nil: its fields
// have no word), not among out: a record is judged against its newest
// anchors, then its nearest, without repeats.
func (n *Node) nearAnchors(ctx context.Context, group string, sig *nearSig, out []store.KeyTime) ([]store.KeyTime, error) {
	if n.adm.nearest == 0 || sig == nil {
		return out, nil
	}
	g, err := n.adm.near.group(ctx, n.adm.hashed, n.st, group)
	if err != nil {
		return nil, err
	}
	recent := len(out)
	added := 0
	for _, c := range n.adm.near.lookup(g, sig, nil) {
		if added == n.adm.nearest {
			break
		}
		if slices.ContainsFunc(out[:recent], func(kt store.KeyTime) bool { return kt.Key == c.kt.Key }) || !n.isAnchor(c.kt.Key) {
			continue
		}
		if ok, err := n.st.Has(ctx, c.kt.Key); err != nil {
			return nil, err
		} else if ok {
			out = append(out, c.kt)
			added++
		}
	}
	return out, nil
}

// negligible reports whether a record whose evaluable fields are ev
// (evaluableFields), judged at now in the hashed kernel, is admitted to
// bootstrap (svaf.Config.Negligible) whatever the vectors, given its
// group's newest anchors, newest first: all of its anchors when there are
// fewer than Recent, else every other anchor is no newer than the last of
// them (the store's time order), and the nearest add at most Nearest of
// those. Anchors committed since the scan are left out, as a search made
// just after it would have.
func (a *admission) negligible(now time.Time, ev *[cmb.NumFields]string, recent []store.KeyTime) bool {
	// heavy is some field's weight bound past negligible. A field's bound
	// only grows with decay, and decay, a rounded sum of terms of at least
	// 0, never shrinks as terms are added: once heavy, the full sum is too.
	// So a live record, whose newest anchor alone weighs, is answered after
	// one term.
	heavy := func(decay float64) bool {
		for i, t := range ev {
			if t != "" && !a.cfg.Negligible(cmb.FieldNames[i], decay) {
				return true
			}
		}
		return false
	}
	decay := 0.0
	for i, kt := range recent {
		decay += a.cfg.Decay(now.Sub(time.UnixMilli(kt.CreatedAt)))
		if i == 0 && heavy(decay) {
			return false
		}
	}
	if len(recent) >= a.recent && a.nearest > 0 {
		decay += float64(a.nearest) * a.cfg.Decay(now.Sub(time.UnixMilli(recent[len(recent)-1].CreatedAt)))
	}
	return !heavy(decay)
}

// judge evaluates a checked broadcast record against the anchors and
// returns the verdict with the annexes to store beside the record.
func (n *Node) judge(ctx context.Context, rec *cmb.Record) (verdictRecord, []store.ItemAnnex, error) {
	all := rec.Fields.Texts()
	ev, evaluable := evaluableFields(&all)
	now := n.now()
	w := n.adm.work()
	defer n.adm.works.Put(w)
	kts, err := n.recentAnchors(ctx, rec.Group)
	if err != nil {
		return verdictRecord{}, nil, fmt.Errorf("svaf anchors: %w", err)
	}
	// The hashed kernel judges (denseVectorsFor): a record whose anchors
	// all weigh nothing needs no nearest anchors, vectors or evaluation.
	// The dense kernel's verdict also needs its vectors, which are stored
	// with the record.
	d := n.dense
	hashed := d == nil || evaluable == 0 || !d.healthy.Load()
	negligible := hashed && n.adm.recent > 0 && n.adm.negligible(now, &ev, kts)
	// The signature finds the record's near-copies and, once it is
	// stored, the records that copy it: made whatever the verdict. When
	// the hashed kernel evaluates the record, its counts are made in the
	// same pass over the texts (hashFields), else it is made alone.
	var sig nearSig
	var signed bool
	var hin hashedRecord
	if hashed && !negligible {
		var ns nearSigner
		ns.init()
		hin = hashFields(n.adm.hashed, &all, w.sc, &ns)
		sig, signed = ns.finish()
	} else {
		var words [128]uint64 // more than most fields' words
		sig, signed, _ = nearSignature(n.adm.hashed, &all, words[:0])
	}
	var near *nearSig
	if signed {
		n.adm.near.judgedSig(rec.Key, &sig)
		near = &sig
	}
	if negligible {
		out := verdictRecord{Decision: svaf.Aligned, Kernel: n.adm.hashedID, At: now.UnixMilli()}
		annexes, err := verdictAnnex(out)
		if err != nil {
			return verdictRecord{}, nil, err
		}
		return out, annexes, nil
	}
	if kts, err = n.nearAnchors(ctx, rec.Group, near, kts); err != nil {
		return verdictRecord{}, nil, fmt.Errorf("svaf anchors: %w", err)
	}
	// The texts by name are the dense kernel's alone (denseVectorsFor):
	// without an encoder there is nothing to make them for.
	var texts map[string]string
	if d != nil {
		texts = fieldTexts(all)
	}
	return n.evaluate(ctx, w, rec, texts, hin, kts, now)
}

// evaluate judges rec, with texts, at now against the anchors kts and
// returns the verdict with the annexes to store beside the record; hin
// is rec's hashed counts when already made (nil: made here if the hashed
// kernel judges).
func (n *Node) evaluate(ctx context.Context, w *hashedWork, rec *cmb.Record, texts map[string]string, hin hashedRecord, kts []store.KeyTime, now time.Time) (verdictRecord, []store.ItemAnnex, error) {
	// The anchors are built in w's slice: nothing keeps them past the
	// verdict (its Nearest is a key's string).
	anchors := w.anchors[:0]
	// An anchor whose hashed counts are cached needs no read: its texts
	// only ever make those counts.
	w.hrs, w.missed = w.hrs[:0], w.missed[:0]
	for _, kt := range kts {
		hr, ok := n.adm.vecs.get(kt.Key)
		if !ok {
			r, err := n.st.GetLineage(ctx, kt.Key)
			if errors.Is(err, store.ErrNotFound) {
				continue
			}
			if err != nil {
				return verdictRecord{}, nil, fmt.Errorf("svaf anchor %s: %w", kt.Key, err)
			}
			w.missed = append(w.missed, missedAnchor{at: len(anchors), texts: r.Texts})
		}
		anchors = append(anchors, svaf.Anchor{Key: kt.Key, Age: now.Sub(time.UnixMilli(kt.CreatedAt))})
		w.hrs = append(w.hrs, hr)
	}
	w.anchors = anchors
	// A record's age is its signed createdAt's (MMP A15), future clamped to 0.
	age := max(now.Sub(time.UnixMilli(rec.CreatedAt)), 0)
	var v svaf.Verdict
	in, kernel, dense := n.denseVectorsFor(ctx, texts, anchors)
	if in != nil {
		v = svaf.Evaluate(n.adm.cfg, in, anchors, age)
	} else {
		kernel = n.adm.hashedID
		if hin == nil {
			all := rec.Fields.Texts()
			hin = hashFields(n.adm.hashed, &all, w.sc, nil)
		}
		// The record is the next one's newest anchor, most likely.
		n.adm.vecs.put(rec.Key, hin)
		for _, m := range w.missed {
			w.hrs[m.at] = hashFields(n.adm.hashed, &m.texts, w.sc, nil)
			n.adm.vecs.put(anchors[m.at].Key, w.hrs[m.at])
		}
		v = w.judge(n.adm.cfg, hin, anchors, age)
	}
	out := verdictRecord{Decision: v.Decision, Drift: round9(v.TotalDrift), Kernel: kernel, At: now.UnixMilli()}
	if v.Decision == svaf.Redundant {
		out.Nearest = v.Nearest
	}
	annexes, err := verdictAnnex(out)
	if err != nil {
		return verdictRecord{}, nil, err
	}
	if dense != nil {
		annexes = append(annexes, store.ItemAnnex{NS: n.dense.ns, Value: encodeFields(n.dense.k.Dim, dense)})
	}
	return out, annexes, nil
}

// hashedWork is judge's and evaluate's working memory in the hashed kernel.
type hashedWork struct {
	sc      *hashScratch
	ev      svaf.Evaluator
	anchors []svaf.Anchor  // evaluate's
	hrs     []hashedRecord // the anchors', by anchor
	missed  []missedAnchor // the anchors not cached
	pos     []int          // judge's place in each anchor's fields
	fields  []svaf.Field
	of      []svaf.Sparse // the fields' anchor vectors
	x       []float64     // the record's vectors, dense
	vals    []float64     // the anchors' values not kept (hashedField.sparse)
}

// missedAnchor is an anchor whose counts were not cached, with its texts.
type missedAnchor struct {
	at    int
	texts [cmb.NumFields]string
}

// work is judge's and evaluate's working memory for the hashed kernel's dim.
func (a *admission) work() *hashedWork {
	if w, ok := a.works.Get().(*hashedWork); ok && len(w.sc.counts) == a.hashed.Dim {
		return w
	}
	return &hashedWork{sc: newHashScratch(a.hashed.Dim)}
}

// judge evaluates the record of counts hin against anchors, whose counts
// are w.hrs: each field's vectors go to SVAF as they are cached, only the
// record's own made dense.
func (w *hashedWork) judge(c svaf.Config, hin hashedRecord, anchors []svaf.Anchor, age time.Duration) svaf.Verdict {
	n := len(anchors)
	size := 0
	for _, f := range hin {
		size += f.vec.Dim
	}
	w.x = slices.Grow(w.x[:0], size)[:size]
	w.of = slices.Grow(w.of[:0], len(hin)*n)[:len(hin)*n]
	vals := 0 // the values of fields not kept expanded
	for _, hr := range w.hrs {
		for k := range hr {
			vals += hr[k].values()
		}
	}
	w.vals = slices.Grow(w.vals[:0], vals)[:vals]
	buf := w.vals
	w.pos = slices.Grow(w.pos[:0], n)[:n]
	clear(w.pos)
	w.fields = w.fields[:0]
	x := w.x
	for k := range hin {
		f := &hin[k]
		fx := x[:f.vec.Dim:f.vec.Dim]
		x = x[f.vec.Dim:]
		f.dense(fx)
		of := w.of[k*n : (k+1)*n : (k+1)*n]
		// The record's fields and each anchor's are both in name order.
		for i, hr := range w.hrs {
			of[i] = svaf.Sparse{}
			p := w.pos[i]
			for p < len(hr) && fieldRank[hr[p].field] < fieldRank[f.field] {
				p++
			}
			if p < len(hr) && hr[p].field == f.field {
				of[i], buf = hr[p].sparse(buf)
				p++
			}
			w.pos[i] = p
		}
		w.fields = append(w.fields, svaf.Field{Name: cmb.FieldNames[f.field], X: fx, XX: f.vec.NN, Anchors: of})
	}
	return w.ev.Evaluate(c, w.fields, anchors, age)
}

func round9(x float64) float64 { return math.Round(x*1e9) / 1e9 }

func to64(v []float32) []float64 {
	out := make([]float64, len(v))
	for i, x := range v {
		out[i] = float64(x)
	}
	return out
}

// verdictAnnex is a verdict as its record's annex.
func verdictAnnex(v verdictRecord) ([]store.ItemAnnex, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return []store.ItemAnnex{{NS: annexSVAF, Value: b}}, nil
}

// countVerdict makes a verdict stored with its record count.
func (n *Node) countVerdict(key string, v verdictRecord) {
	n.adm.mu.Lock()
	n.adm.verdicts[key] = v
	n.adm.counts[v.Decision]++
	n.adm.mu.Unlock()
}

// SVAFCounts are the verdicts reached since Open, by decision.
func (n *Node) SVAFCounts() map[string]int64 {
	n.adm.mu.RLock()
	defer n.adm.mu.RUnlock()
	out := make(map[string]int64, len(n.adm.counts))
	for d, c := range n.adm.counts {
		out[string(d)] = c
	}
	return out
}
