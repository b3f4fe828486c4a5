package node

import (
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cmbnode/cmbnode/cmb"
	"github.com/cmbnode/cmbnode/node/embed"
	"github.com/cmbnode/cmbnode/node/svaf"
	"github.com/cmbnode/cmbnode/store"
)

// Dense vectors (docs/recall.md "Encoders").
//
// With an encoder configured, every held record gets one vector per
// evaluable field, computed by a background worker: put only marks the
// record pending, so neither remember's acknowledgement nor a receive ever
// waits for the encoder. The worker encodes pending records in batches and
// keeps the vectors in a store annex named after the kernel
// ("vec.<kernel id>"); on failure it keeps them pending and retries with a
// backoff up to DenseOptions.MaxBackoff. At Open, records without vectors in
// the kernel are pending again, so a new kernel backfills the store and
// vectors of another kernel are never read: they live under another name.
//
// For retrieval each record's field vectors are pooled (their normalised
// mean) and held in memory; a query is encoded once and compared with every
// pooled vector (brute force: ~Dim·4 bytes and one dot product per record).

// DenseOptions tune the dense encoder's use. The zero value is usable.
type DenseOptions struct {
	// Floor is the cosine at or below which a record is no evidence; a
	// similarity s above it counts as (s − Floor)/(1 − Floor), the fixed
	// [0,1] scale ranking needs (default 0.5).
	Floor float64
	// QueryTimeout bounds encoding one query (default 3 s): on expiry the
	// recall is lexical only.
	QueryTimeout time.Duration
	// BatchRecords is how many pending records one worker round encodes
	// (default 16); MaxBackoff caps the wait between failed rounds
	// (default 1 min).
	BatchRecords int
	MaxBackoff   time.Duration
}

// denseIndex is a kernel's vectors and the worker that computes them.
type denseIndex struct {
	enc  embed.Encoder
	k    embed.Kernel
	ns   string
	o    DenseOptions
	st   *store.Store
	log  *slog.Logger
	stop chan struct{}
	done chan struct{}
	wake chan struct{}

	mu      sync.RWMutex
	pooled  map[string]pooledVec
	pending map[string]struct{}
	// failures counts failed worker rounds since Open.
	failures int64
	// healthy is false from the moment an encode fails or times out (at
	// receive or in the worker) until the worker's next successful encode:
	// while it is false SVAF judges with the hashed kernel without asking
	// the encoder, so receiving never waits on an encoder that is down or
	// hung. It starts true.
	healthy atomic.Bool
}

type pooledVec struct {
	v  []float32
	at int64 // the record's time in the store's orders, ms
}

func newDenseIndex(enc embed.Encoder, o DenseOptions, st *store.Store, log *slog.Logger) (*denseIndex, error) {
	k := enc.Kernel()
	if err := embed.CheckKernel(k); err != nil {
		return nil, err
	}
	if k.ID == embed.DefaultHashed().Kernel().ID {
		return nil, fmt.Errorf("encoder kernel %s is the built-in fallback's name", k.ID)
	}
	if o.Floor <= 0 || o.Floor >= 1 {
		o.Floor = 0.5
	}
	if o.QueryTimeout <= 0 {
		o.QueryTimeout = 3 * time.Second
	}
	if o.BatchRecords <= 0 {
		o.BatchRecords = 16
	}
	if o.MaxBackoff <= 0 {
		o.MaxBackoff = time.Minute
	}
	d := &denseIndex{enc: enc, k: k, ns: "vec." + k.ID, o: o, st: st, log: log,
		stop: make(chan struct{}), done: make(chan struct{}), wake: make(chan struct{}, 1),
		pooled: map[string]pooledVec{}, pending: map[string]struct{}{}}
	d.healthy.Store(true)
	return d, nil
}

// setHealthy records whether the encoder's last call succeeded, logging a
// change.
func (d *denseIndex) setHealthy(ok bool, err error) {
	if d.healthy.Swap(ok) == ok {
		return
	}
	if ok {
		d.log.Info("dense encoder answers again; SVAF judges with it", "kernel", d.k.ID)
	} else {
		d.log.Warn("dense encoder failed; SVAF judges with the hashed kernel until the worker's next success", "kernel", d.k.ID, "err", err)
	}
}

// encodeFields is a record's field vectors in annex form: a byte of field
// bits (cmb.FieldNames order), then Dim little-endian float32 per field set.
func encodeFields(dim int, fv map[string][]float32) []byte {
	var mask byte
	for i, name := range cmb.FieldNames {
		if _, ok := fv[name]; ok {
			mask |= 1 << i
		}
	}
	b := make([]byte, 1, 1+len(fv)*dim*4)
	b[0] = mask
	for i, name := range cmb.FieldNames {
		if mask&(1<<i) != 0 {
			for _, x := range fv[name] {
				b = binary.LittleEndian.AppendUint32(b, math.Float32bits(x))
			}
		}
	}
	return b
}

func decodeFields(dim int, b []byte) (map[string][]float32, error) {
	if len(b) == 0 {
		return nil, errors.New("empty vector annex")
	}
	mask, b := b[0], b[1:]
	out := map[string][]float32{}
	for i, name := range cmb.FieldNames {
		if mask&(1<<i) == 0 {
			continue
		}
		if len(b) < dim*4 {
			return nil, errors.New("truncated vector annex")
		}
		v := make([]float32, dim)
		for j := range v {
			v[j] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*j:]))
		}
		out[name], b = v, b[dim*4:]
	}
	if len(b) != 0 {
		return nil, errors.New("vector annex has trailing bytes")
	}
	return out, nil
}

// pool is the normalised mean of a record's field vectors (nil if none).
func pool(dim int, fv map[string][]float32) []float32 {
	if len(fv) == 0 {
		return nil
	}
	p := make([]float32, dim)
	for _, v := range fv {
		for i, x := range v {
			p[i] += x
		}
	}
	embed.Normalize(p)
	return p
}

// load reads the kernel's vectors and marks every record lacking them
// pending, dropping vectors whose record is gone.
func (d *denseIndex) load(ctx context.Context) error {
	at := map[string]int64{}
	if err := d.st.Scan(ctx, store.Window{AnyGroup: true}, func(kt store.KeyTime) error {
		at[kt.Key] = kt.CreatedAt
		return nil
	}); err != nil {
		return err
	}
	var gone []store.Annex
	err := d.st.ScanAnnexes(ctx, d.ns, func(key string, val []byte) error {
		t, ok := at[key]
		if !ok {
			gone = append(gone, store.Annex{Key: key})
			return nil
		}
		fv, err := decodeFields(d.k.Dim, val)
		if err != nil {
			gone = append(gone, store.Annex{Key: key}) // recomputed below
			return nil
		}
		d.pooled[key] = pooledVec{v: pool(d.k.Dim, fv), at: t}
		return nil
	})
	if err != nil {
		return err
	}
	for k := range at {
		if _, ok := d.pooled[k]; !ok {
			d.pending[k] = struct{}{}
		}
	}
	return d.st.PutAnnexes(ctx, d.ns, gone)
}

// enqueue marks a stored record pending; it never blocks.
func (d *denseIndex) enqueue(key string) {
	d.mu.Lock()
	if _, ok := d.pooled[key]; !ok {
		d.pending[key] = struct{}{}
	}
	d.mu.Unlock()
	d.wakeUp()
}

func (d *denseIndex) wakeUp() {
	select {
	case d.wake <- struct{}{}:
	default:
	}
}

// run is the worker: it encodes pending records until stopped.
func (d *denseIndex) run() {
	defer close(d.done)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-d.stop
		cancel()
	}()
	backoff := time.Duration(0)
	for {
		if backoff > 0 {
			select {
			case <-d.stop:
				return
			case <-time.After(backoff):
			}
		}
		batch := d.take()
		if len(batch) == 0 {
			select {
			case <-d.stop:
				return
			case <-d.wake:
				continue
			}
		}
		if err := d.index(ctx, batch); err != nil {
			if ctx.Err() != nil {
				return
			}
			d.mu.Lock()
			d.failures++
			for _, k := range batch {
				d.pending[k] = struct{}{}
			}
			d.mu.Unlock()
			backoff = min(max(2*backoff, time.Second), d.o.MaxBackoff)
			d.log.Warn("dense encoder failed; its records stay pending and are retried", "kernel", d.k.ID, "records", len(batch), "retryIn", backoff, "err", err)
			continue
		}
		backoff = 0
	}
}

// take removes up to BatchRecords pending keys.
func (d *denseIndex) take() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []string
	for k := range d.pending {
		if len(out) == d.o.BatchRecords {
			break
		}
		out = append(out, k)
		delete(d.pending, k)
	}
	return out
}

// index encodes keys' evaluable fields and keeps the vectors.
func (d *denseIndex) index(ctx context.Context, keys []string) error {
	type item struct {
		key   string
		at    int64
		names []string
	}
	var items []item
	var texts []string
	var ready []store.Annex // nothing to write for these
	readyPooled := map[string]pooledVec{}
	for _, k := range keys {
		r, err := d.st.GetLineage(ctx, k)
		if errors.Is(err, store.ErrNotFound) {
			continue // purged since
		}
		if err != nil {
			return err
		}
		it := item{key: k, at: r.CreatedAt}
		// SVAF may have stored them with the record already.
		if fv, ok, err := d.fields(ctx, k); err == nil && ok {
			readyPooled[k] = pooledVec{v: pool(d.k.Dim, fv), at: r.CreatedAt}
			continue
		}
		ft := fieldTexts(r.Texts)
		for _, name := range cmb.FieldNames {
			if t, ok := ft[name]; ok {
				it.names = append(it.names, name)
				texts = append(texts, t)
			}
		}
		items = append(items, it)
	}
	var vs [][]float32
	if len(texts) > 0 {
		var err error
		if vs, err = d.enc.Encode(ctx, texts); err == nil && len(vs) != len(texts) {
			err = fmt.Errorf("%w: %d vectors for %d texts", embed.ErrEncoder, len(vs), len(texts))
		}
		if err != nil {
			if ctx.Err() == nil {
				d.setHealthy(false, err)
			}
			return err
		}
		d.setHealthy(true, nil)
	}
	annexes, pooled := ready, readyPooled
	i := 0
	for _, it := range items {
		fv := map[string][]float32{}
		for _, name := range it.names {
			if len(vs[i]) != d.k.Dim {
				return fmt.Errorf("%w: a vector of %d dimensions in kernel %s of %d", embed.ErrEncoder, len(vs[i]), d.k.ID, d.k.Dim)
			}
			fv[name] = vs[i]
			i++
		}
		annexes = append(annexes, store.Annex{Key: it.key, Value: encodeFields(d.k.Dim, fv)})
		pooled[it.key] = pooledVec{v: pool(d.k.Dim, fv), at: it.at}
	}
	return d.keep(ctx, annexes, pooled)
}

func (d *denseIndex) keep(ctx context.Context, annexes []store.Annex, pooled map[string]pooledVec) error {
	if err := d.st.PutAnnexes(ctx, d.ns, annexes); err != nil {
		return err
	}
	d.mu.Lock()
	for k, p := range pooled {
		d.pooled[k] = p
		delete(d.pending, k)
	}
	d.mu.Unlock()
	return nil
}

// fields returns a record's stored field vectors in this kernel.
func (d *denseIndex) fields(ctx context.Context, key string) (map[string][]float32, bool, error) {
	b, ok, err := d.st.GetAnnex(ctx, d.ns, key)
	if err != nil || !ok {
		return nil, false, err
	}
	fv, err := decodeFields(d.k.Dim, b)
	return fv, err == nil, err
}

// search returns up to limit held records by similarity to q (unit
// length), on the [0,1] scale of DenseOptions.Floor, leaving out records
// after asOf and records no more similar than the floor.
func (d *denseIndex) search(q []float32, limit int, asOf time.Time) []Evidence {
	asOfMs := asOf.UnixMilli()
	d.mu.RLock()
	out := make([]Evidence, 0, limit+1)
	for k, p := range d.pooled {
		if p.v == nil || p.at > asOfMs {
			continue
		}
		s := (embed.Dot(q, p.v) - d.o.Floor) / (1 - d.o.Floor)
		if s <= 0 {
			continue
		}
		if len(out) == limit && s <= out[len(out)-1].Similarity {
			continue
		}
		e := Evidence{Key: k, Similarity: min(s, 1)}
		i, _ := slices.BinarySearchFunc(out, e, func(a, b Evidence) int {
			if c := cmp.Compare(b.Similarity, a.Similarity); c != 0 {
				return c
			}
			return cmp.Compare(a.Key, b.Key)
		})
		out = slices.Insert(out, i, e)
		if len(out) > limit {
			out = out[:limit]
		}
	}
	d.mu.RUnlock()
	return out
}

// DenseStatus describes the dense encoder's progress.
type DenseStatus struct {
	Kernel      string `json:"kernel"`
	Fingerprint string `json:"fingerprint"`
	Dim         int    `json:"dim"`
	Indexed     int    `json:"indexed"`
	Pending     int    `json:"pending"`
	Failures    int64  `json:"failures"`
}

// Dense reports the dense encoder's kernel and progress; ok is false when
// none is configured.
func (n *Node) Dense() (DenseStatus, bool) {
	d := n.dense
	if d == nil {
		return DenseStatus{}, false
	}
	d.mu.RLock()
	defer d.mu.RUnlock()
	return DenseStatus{Kernel: d.k.ID, Fingerprint: d.k.Fingerprint, Dim: d.k.Dim, Indexed: len(d.pooled), Pending: len(d.pending), Failures: d.failures}, true
}

// EmbeddingsKernel is the configured encoder's kernel, for CGP's
// embeddings_fingerprint; ok is false when none is configured.
func (n *Node) EmbeddingsKernel() (embed.Kernel, bool) {
	if n.dense == nil {
		return embed.Kernel{}, false
	}
	return n.dense.k, true
}

// denseVectorsFor encodes an incoming record's fields in the dense kernel
// and gives the anchors theirs, for SVAF; it also returns the incoming
// record's field vectors, to be stored in its commit. It returns nil (judge
// with the hashed kernel) if no encoder is configured, it is unhealthy (its
// last call failed: it is not asked until the worker's next success), it
// does not answer within SVAFOptions.EncoderTimeout, or an anchor lacks
// vectors in the kernel: one evaluation never mixes kernels.
func (n *Node) denseVectorsFor(ctx context.Context, texts map[string]string, anchors []svaf.Anchor) (svaf.Vectors, string, map[string][]float32) {
	d := n.dense
	if d == nil || len(texts) == 0 || !d.healthy.Load() {
		return nil, "", nil
	}
	clearAnchors := func() {
		for i := range anchors {
			anchors[i].Vectors = nil
		}
	}
	for i := range anchors {
		fv, ok, err := d.fields(ctx, anchors[i].Key)
		if err != nil || !ok {
			clearAnchors()
			return nil, "", nil
		}
		anchors[i].Vectors = make(svaf.Vectors, len(fv))
		for f, v := range fv {
			anchors[i].Vectors[f] = to64(v)
		}
	}
	names := make([]string, 0, len(texts))
	list := make([]string, 0, len(texts))
	for _, name := range cmb.FieldNames {
		if t, ok := texts[name]; ok {
			names, list = append(names, name), append(list, t)
		}
	}
	ectx, cancel := context.WithTimeout(ctx, n.adm.timeout)
	defer cancel()
	vs, err := d.enc.Encode(ectx, list)
	if err == nil && len(vs) != len(list) {
		err = fmt.Errorf("%w: %d vectors for %d texts", embed.ErrEncoder, len(vs), len(list))
	}
	if err != nil {
		clearAnchors()
		if ctx.Err() == nil {
			d.setHealthy(false, err)
		}
		return nil, "", nil
	}
	out := make(svaf.Vectors, len(vs))
	fv := make(map[string][]float32, len(vs))
	for i, v := range vs {
		if len(v) != d.k.Dim {
			clearAnchors()
			d.setHealthy(false, fmt.Errorf("%w: a vector of %d dimensions in kernel %s of %d", embed.ErrEncoder, len(v), d.k.ID, d.k.Dim))
			return nil, "", nil
		}
		out[names[i]], fv[names[i]] = to64(v), v
	}
	return out, d.k.ID, fv
}

// encodeQuery encodes a query in the dense kernel within QueryTimeout; nil
// (lexical evidence only) if the encoder does not answer.
func (n *Node) encodeQuery(ctx context.Context, query string) []float32 {
	d := n.dense
	ctx, cancel := context.WithTimeout(ctx, d.o.QueryTimeout)
	defer cancel()
	vs, err := d.enc.Encode(ctx, []string{query})
	if err != nil || len(vs) != 1 || len(vs[0]) != d.k.Dim {
		n.log.Warn("dense encoder did not answer for a query; ranking by text alone", "kernel", d.k.ID, "err", err)
		return nil
	}
	return vs[0]
}

// ErrEmbedding is wrapped when a query vector cannot be used: no encoder
// is configured, or its length is not the kernel's dimension.
var ErrEmbedding = errors.New("query embedding refused")

// SearchVector is SearchText with the query's vector in the dense kernel
// given (CGP's query embedding, sent only by a host whose fingerprint is
// ours): it is used as is instead of encoding text.
func (n *Node) SearchVector(ctx context.Context, text string, vec []float64, limit int, asOf time.Time) ([]TextHit, error) {
	d := n.dense
	if d == nil {
		return nil, fmt.Errorf("%w: no dense encoder is configured", ErrEmbedding)
	}
	if len(vec) != d.k.Dim {
		return nil, fmt.Errorf("%w: %d dimensions, kernel %s has %d", ErrEmbedding, len(vec), d.k.ID, d.k.Dim)
	}
	q := make([]float32, len(vec))
	for i, x := range vec {
		q[i] = float32(x)
	}
	if !embed.Normalize(q) {
		return nil, fmt.Errorf("%w: it holds NaN or infinity", ErrEmbedding)
	}
	return n.searchText(ctx, text, q, limit, asOf)
}
