package mesh

import (
	"container/heap"
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/cmbnode/cmbnode/cmb"
	"github.com/cmbnode/cmbnode/node"
	"github.com/cmbnode/cmbnode/node/groupkey"
)

const (
	fetchBatch = 128 // keys per x-cmbnode-fetch-many request
	// recordsBudget and maxFetchKeys cap one answer (budget.go): keys past
	// maxFetchKeys, and records past the budget (but always one), are
	// neither sent nor reported missing, and the requester asks again.
	recordsBudget  = 256 << 10
	maxFetchKeys   = fetchBatch
	maxPending     = 100_000 // parents waiting to be fetched
	maxFetchDepth  = 1024    // hops a parent fetch recurses before leaving the rest to catch-up
	firstFetchWait = 300 * time.Millisecond
	// pendingFetchTimeout bounds one parent fetch from one peer.
	pendingFetchTimeout = 5 * time.Second
)

// ---- serving ----

// served returns the record held under key in the form this session's
// peer may see; the node decides what that is (node.Serve). In a private
// group it is sealed for the group at the session's epoch, bound to key.
func (ss *session) served(ctx context.Context, key string) (fetchedRecord, bool) {
	m := ss.m
	sr, ok, err := m.n.Serve(ctx, key, ss.nodeID)
	if err != nil {
		if ctx.Err() == nil {
			m.log.Warn("cannot serve a record", "key", key, "requester", ss.nodeID, "err", err)
		}
		return fetchedRecord{}, false
	}
	if !ok {
		return fetchedRecord{}, false
	}
	fr := fetchedRecord{CMB: sr.Raw, PublicKey: sr.AuthorKey, E2EPublicKey: sr.AuthorE2E}
	if m.keys == nil {
		return fr, true
	}
	plain, err := json.Marshal(fr)
	if err == nil {
		var box []byte
		if box, err = m.keys.SealEpoch(ss.epoch, groupkey.KindRecord, key, plain); err == nil {
			return fetchedRecord{Key: key, Box: box}, true
		}
	}
	m.log.Warn("cannot seal a record for the group", "key", key, "err", err)
	return fetchedRecord{}, false
}

// open returns a fetched record in its public form. In a private group it
// opens the envelope, which must be bound to a key we asked for, and the
// record inside must carry that key.
func (ss *session) open(fr fetchedRecord, asked map[string]bool) (*cmb.Record, fetchedRecord, bool) {
	m := ss.m
	if m.keys != nil {
		if !asked[fr.Key] || len(fr.Box) == 0 {
			return nil, fetchedRecord{}, false
		}
		plain, _, err := m.keys.Open(groupkey.KindRecord, fr.Key, fr.Box)
		var inner fetchedRecord
		if err == nil {
			err = json.Unmarshal(plain, &inner)
		}
		if err != nil || len(inner.CMB) == 0 {
			m.n.Counters.Received.Add(1)
			m.n.Counters.CountReject("bad-envelope")
			m.log.Debug("fetched envelope does not open", "peer", ss.pid, "key", fr.Key, "err", err)
			return nil, fetchedRecord{}, false
		}
		want := fr.Key
		fr = inner
		rec, err := cmb.Decode(fr.CMB)
		if err != nil || rec.Key != want {
			return nil, fetchedRecord{}, false
		}
		return rec, fr, true
	}
	rec, err := cmb.Decode(fr.CMB)
	if err != nil || !asked[rec.Key] {
		return nil, fetchedRecord{}, false
	}
	return rec, fr, true
}

// serveFetch answers MMP's cmb-fetch. A private group's records travel
// only sealed (x-cmbnode-fetch-many), and cmb-fetch-result has no sealed
// form, so there it answers not found.
func (ss *session) serveFetch(ctx context.Context, f *cmb.Fetch) {
	ss.m.stats.fetchServed.Add(1)
	res := &cmb.FetchResult{ReqID: f.ReqID, Key: f.Key, Timestamp: time.Now().UnixMilli()}
	if ss.m.keys != nil {
		_ = ss.send(res)
		return
	}
	if fr, ok := ss.served(ctx, f.Key); ok {
		if rec, err := cmb.Decode(fr.CMB); err == nil {
			res.Found, res.CMB, res.PublicKey, res.E2EPublicKey = true, rec, fr.PublicKey, fr.E2EPublicKey
		}
	}
	if p, err := cmb.MarshalFrame(res); err == nil {
		ss.answer(ctx, p)
	}
}

// serveFetchMany answers each distinct key asked for once, within the
// per-answer caps.
func (ss *session) serveFetchMany(ctx context.Context, req *fetchMany) {
	ss.m.stats.fetchServed.Add(1)
	res := recordsResp{ReqID: req.ReqID}
	size := 0
	seen := make(map[string]bool, min(len(req.Keys), maxFetchKeys))
	for _, k := range req.Keys {
		if seen[k] {
			continue
		}
		if len(seen) >= maxFetchKeys {
			ss.m.stats.serveTruncated.Add(1)
			break
		}
		seen[k] = true
		fr, ok := ss.served(ctx, k)
		if !ok {
			res.Missing = append(res.Missing, k)
			continue
		}
		// A box is sent base64-encoded: 4 bytes for every 3.
		n := len(fr.CMB) + len(fr.PublicKey) + len(fr.E2EPublicKey) + len(fr.Key) + (len(fr.Box)+2)/3*4 + 64
		if size+n > recordsBudget && len(res.Records) > 0 {
			ss.m.stats.serveTruncated.Add(1)
			break // the rest is neither sent nor missing: the requester asks again
		}
		size += n
		res.Records = append(res.Records, fr)
	}
	p, err := marshalVendor(typeRecords, res)
	if err == nil {
		ss.answer(ctx, p)
	}
}

// ---- fetching ----

// fetchFrom asks one peer for keys and ingests what it returns, parents
// first. It returns the keys now held and the keys the peer does not serve.
func (m *Mesh) fetchFrom(ctx context.Context, ss *session, keys []string, via string, depth int) (got, missing []string, newCount int, err error) {
	for len(keys) > 0 {
		batch := keys[:min(fetchBatch, len(keys))]
		id := ss.newReqID()
		p, err := marshalVendor(typeFetchMany, fetchMany{ReqID: id, Keys: batch})
		if err != nil {
			return got, missing, newCount, err
		}
		in, err := ss.request(ctx, id, p)
		if err != nil {
			return got, missing, newCount, err
		}
		res, ok := in.body.(*recordsResp)
		if !ok {
			return got, missing, newCount, errors.New("fetch-many answered with " + in.typ)
		}
		asked := make(map[string]bool, len(batch))
		for _, k := range batch {
			asked[k] = true
		}
		recs := make([]*cmb.Record, 0, len(res.Records))
		keysOf := map[*cmb.Record]fetchedRecord{}
		returned := map[string]bool{} // answered, whether or not we accept it
		for _, fr := range res.Records {
			rec, fr, ok := ss.open(fr, asked)
			if !ok {
				continue // unasked, undecodable or unopenable: a miss, never a command
			}
			returned[rec.Key] = true
			recs = append(recs, rec)
			keysOf[rec] = fr
		}
		// Parents are older than their remixes: storing in time order lets
		// lineage resolve within the batch.
		slices.SortFunc(recs, func(a, b *cmb.Record) int { return int(a.CreatedAt - b.CreatedAt) })
		done := map[string]bool{}
		var wg sync.WaitGroup
		var mu sync.Mutex
		sem := make(chan struct{}, 16)
		for _, rec := range recs {
			fr := keysOf[rec]
			sem <- struct{}{}
			wg.Go(func() {
				defer func() { <-sem }()
				isNew, ok := m.ingest(ctx, rec, fr, ss, via, depth)
				mu.Lock()
				if ok {
					done[rec.Key] = true
				}
				if isNew {
					newCount++
				}
				mu.Unlock()
			})
		}
		wg.Wait()
		for _, k := range res.Missing {
			if asked[k] {
				missing = append(missing, k)
			}
		}
		for k := range done {
			got = append(got, k)
		}
		answered := len(done) + len(res.Missing)
		if len(res.Records) == 0 && len(res.Missing) == 0 {
			return got, missing, newCount, nil // peer serves nothing more; avoid spinning
		}
		// Keys neither returned nor reported missing did not fit in the
		// answer; ask again for them.
		var rest []string
		for _, k := range batch {
			if !done[k] && !returned[k] && !slices.Contains(res.Missing, k) {
				rest = append(rest, k)
			}
		}
		if answered == 0 && len(rest) == len(batch) {
			return got, missing, newCount, nil
		}
		keys = append(rest, keys[len(batch):]...)
	}
	return got, missing, newCount, nil
}

// ingest checks and stores one record obtained by fetch or catch-up. ok is
// true when the record is held (or was valid but not ours to hold).
func (m *Mesh) ingest(ctx context.Context, rec *cmb.Record, fr fetchedRecord, ss *session, via string, depth int) (isNew, ok bool) {
	c, err := m.n.Check(ctx, rec, node.Source{
		PeerID: ss.pid.String(), NodeID: ss.nodeID, AuthorKey: fr.PublicKey, AuthorE2E: fr.E2EPublicKey, Via: via,
	})
	switch {
	case errors.Is(err, node.ErrNotForUs):
		return false, true
	case err != nil:
		m.log.Debug("fetched record rejected", "key", rec.Key, "peer", ss.pid, "via", via, "err", err)
		return false, false
	case c.Duplicate:
		m.n.Counters.Duplicates.Add(1)
		return false, true
	}
	isNew = m.accept(ctx, c, depth)
	if isNew {
		switch via {
		case viaFetch:
			m.n.Counters.Fetched.Add(1)
		case viaCatchUp:
			m.n.Counters.CaughtUp.Add(1)
		}
	}
	return isNew, true
}

const (
	viaFetch   = "fetch"
	viaCatchUp = "catch-up"
)

// ingestFrame handles a cmb frame sent directly on a stream. A private
// group's records travel only sealed, so there a clear one is refused.
func (m *Mesh) ingestFrame(ctx context.Context, f *cmb.CMBFrame, ss *session, via string) {
	if m.keys != nil {
		m.n.Counters.Received.Add(1)
		m.n.Counters.CountReject("bad-envelope")
		return
	}
	m.ingest(ctx, f.CMB, fetchedRecord{PublicKey: f.PublicKey, E2EPublicKey: f.E2EPublicKey}, ss, via, 0)
}

// ---- missing parents ----

// pending holds parents some stored remix names but this node lacks. They
// are fetched from the peer that delivered the remix, then from every other
// group peer; a key nobody serves yet is retried with backoff (300 ms, then
// 1 s doubling to PendingRetryMax) and dropped PendingTTL after it was
// added. Each author's remixes may hold at most PendingPerAuthor keys
// here, so one member's orphans cannot fill the set for everyone. A
// fetched parent with missing parents of its own adds them one hop deeper,
// up to maxFetchDepth hops. What is dropped, deeper lineage, and anything
// pending when the node stops (this set is in memory) arrives by catch-up,
// which pulls every record the group holds.
//
// The set is a heap by due time, and run sleeps until the earliest is due:
// a node holding parents nobody serves does no work between retries.
type pending struct {
	m        *Mesh
	now      func() time.Time
	mu       sync.Mutex
	items    map[string]*want
	queue    wantQueue // the items not being fetched, by due time
	byAuthor map[string]int
	wake     chan struct{}
}

type want struct {
	key      string
	author   string // of the record that named the key
	hint     peer.ID
	depth    int
	attempts int
	added    time.Time
	due      time.Time
	index    int // in queue; -1 while a round fetches it
}

// wantQueue is a container/heap of wants, earliest due first.
type wantQueue []*want

func (q wantQueue) Len() int           { return len(q) }
func (q wantQueue) Less(i, j int) bool { return q[i].due.Before(q[j].due) }
func (q wantQueue) Swap(i, j int) {
	q[i], q[j] = q[j], q[i]
	q[i].index, q[j].index = i, j
}
func (q *wantQueue) Push(x any) {
	w := x.(*want)
	w.index = len(*q)
	*q = append(*q, w)
}
func (q *wantQueue) Pop() any {
	old := *q
	w := old[len(old)-1]
	old[len(old)-1] = nil
	w.index = -1
	*q = old[:len(old)-1]
	return w
}

// Reasons a missing parent is dropped, in Stats.PendingDropped.
const (
	pendingDepth     = "depth"      // more than maxFetchDepth hops from a received record
	pendingFull      = "full"       // the set holds maxPending keys
	pendingAuthorCap = "author-cap" // the author's remixes hold PendingPerAuthor keys
	pendingExpired   = "expired"    // not found within PendingTTL
)

func newPending(m *Mesh) *pending {
	return &pending{m: m, now: time.Now, items: map[string]*want{}, byAuthor: map[string]int{}, wake: make(chan struct{}, 1)}
}

// add queues the missing parents keys, named by a record of author.
func (p *pending) add(keys []string, author string, hint peer.ID, depth int) {
	if depth > maxFetchDepth {
		p.m.stats.pendingDropped.add(pendingDepth, int64(len(keys)))
		return
	}
	author = strings.ToLower(author)
	now := p.now()
	p.mu.Lock()
	for i, k := range keys {
		if _, ok := p.items[k]; ok {
			continue
		}
		if len(p.items) >= maxPending {
			p.m.stats.pendingDropped.add(pendingFull, int64(len(keys)-i))
			break
		}
		if p.byAuthor[author] >= p.m.cfg.PendingPerAuthor {
			p.m.stats.pendingDropped.add(pendingAuthorCap, 1)
			continue
		}
		w := &want{key: k, author: author, hint: hint, depth: depth, added: now, due: now.Add(firstFetchWait)}
		p.items[k] = w
		p.byAuthor[author]++
		heap.Push(&p.queue, w)
	}
	p.mu.Unlock()
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// Len is the number of parents waiting.
func (p *pending) Len() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.items)
}

// next is how long until the earliest key is due; ok is false when none waits.
func (p *pending) next() (time.Duration, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.queue) == 0 {
		return 0, false
	}
	return p.queue[0].due.Sub(p.now()), true
}

func (p *pending) run(ctx context.Context) {
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		// Never sooner than every 250 ms, so a burst of adds is one round.
		wait, ok := p.next()
		if !ok {
			wait = time.Hour
		}
		t.Reset(max(wait, 250*time.Millisecond))
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			p.round(ctx)
		case <-p.wake:
		}
	}
}

// round fetches every due key and drops the expired ones.
func (p *pending) round(ctx context.Context) {
	now := p.now()
	p.mu.Lock()
	var due []*want
	for len(p.queue) > 0 && !p.queue[0].due.After(now) {
		w := heap.Pop(&p.queue).(*want)
		if now.Sub(w.added) >= p.m.cfg.PendingTTL {
			p.removeLocked(w)
			p.m.stats.pendingDropped.add(pendingExpired, 1)
			continue
		}
		due = append(due, w)
	}
	p.mu.Unlock()
	if len(due) == 0 {
		return
	}
	byKey := map[string]*want{}
	var keys []string
	for _, w := range due {
		// Often the parent arrived meanwhile (gossip, catch-up, an earlier round).
		if has, err := p.m.n.Has(ctx, w.key); err == nil && has {
			p.done(w.key)
			continue
		}
		if p.m.claims.isHeld(w.key) {
			continue // a catch-up is fetching it; look again next round
		}
		byKey[w.key] = w
		keys = append(keys, w.key)
	}
	if len(keys) > 0 {
		p.m.stats.parentFetches.Add(int64(len(keys)))
		for _, ss := range p.m.sessions(due[0].hint) {
			// A peer that does not answer must not hold up the others.
			fctx, cancel := context.WithTimeout(ctx, pendingFetchTimeout)
			got, _, _, err := p.m.fetchFrom(fctx, ss, keys, viaFetch, due[0].depth)
			cancel()
			if err != nil && ctx.Err() != nil {
				return
			}
			for _, k := range got {
				p.done(k)
				delete(byKey, k)
			}
			keys = keys[:0]
			for k := range byKey {
				keys = append(keys, k)
			}
			if len(keys) == 0 {
				break
			}
		}
	}
	p.mu.Lock()
	for _, w := range byKey {
		if p.items[w.key] != w {
			continue // arrived meanwhile
		}
		w.attempts++
		w.due = p.now().Add(min(time.Second<<min(w.attempts-1, 20), p.m.cfg.PendingRetryMax))
		heap.Push(&p.queue, w)
	}
	p.mu.Unlock()
	if len(byKey) > 0 {
		p.m.log.Debug("parents not found yet; will retry", "count", len(byKey))
	}
}

func (p *pending) done(key string) {
	p.mu.Lock()
	if w, ok := p.items[key]; ok {
		if w.index >= 0 {
			heap.Remove(&p.queue, w.index)
		}
		p.removeLocked(w)
	}
	p.mu.Unlock()
}

// removeLocked forgets w, which is out of the queue.
func (p *pending) removeLocked(w *want) {
	delete(p.items, w.key)
	if p.byAuthor[w.author]--; p.byAuthor[w.author] <= 0 {
		delete(p.byAuthor, w.author)
	}
}
