package mesh

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"sync/atomic"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/cmbnode/cmbnode/node"
)

// Catch-up reconciles, pairwise, the records two peers hold for the group.
// Each side pulls what it lacks; nobody pushes. Holdings are compared as
// per-time-bucket digests (node.Digest: count and SHA-256 over the keys),
// coarse first: 30-day buckets over all time, then each differing bucket at
// the next finer width (day, hour, minute, second). A differing bucket the
// peer holds at most leafKeys records in is listed key by key, and the keys
// this node lacks are fetched in batches. Two peers in sync exchange one
// digest per non-empty month, so the periodic round is cheap.
var catchUpWidths = []int64{
	30 * 24 * 3600 * 1000, 24 * 3600 * 1000, 3600 * 1000, 60 * 1000, 1000,
}

const (
	leafKeys = 1000 // list a bucket key by key below this many records
	// keysPage and digestPage cap one answer (budget.go): ~75 KB of keys,
	// ~7 KB of buckets. Below the top level a window holds at most 60
	// buckets of the next width, so only the first digest pages.
	keysPage      = 1000
	digestPage    = 64
	minDigestSpan = 1000 // the finest width served, ms
	progressEvery = 1000 // log progress every this many records pulled
)

var errStop = errors.New("stop")

// catchUpLoop reconciles with every peer each CatchUpInterval and refreshes
// their view of our peers.
func (m *Mesh) catchUpLoop(ctx context.Context) {
	if m.cfg.noCatchUp {
		return
	}
	t := time.NewTicker(m.cfg.CatchUpInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		m.mu.Lock()
		pids := make([]peer.ID, 0, len(m.peers))
		for pid := range m.peers {
			pids = append(pids, pid)
		}
		m.mu.Unlock()
		for _, pid := range pids {
			if ss := m.sessionFor(pid); ss != nil {
				ss.sendPeerInfo()
			}
			m.goRun(func(ctx context.Context) { m.catchUpPeer(ctx, pid, "periodic") })
		}
	}
}

type catchUp struct {
	m       *Mesh
	ss      *session
	pulled  int
	fetched int
	start   time.Time
	why     string
	// expected is what the peer's top-level buckets hold beyond ours: the
	// records this catch-up expects to receive (syncTracker).
	expected atomic.Int64
	// later are missing keys another catch-up had claimed when this one
	// listed them (settle).
	later []string
}

// maxLater bounds the keys a catch-up leaves to others before it waits
// for them (settle).
const maxLater = 4 * keysPage

// CatchUpNow reconciles with every handshaken peer and returns when done
// (tests, and a daemon that wants an immediate sync).
func (m *Mesh) CatchUpNow(ctx context.Context) {
	for _, ss := range m.sessions("") {
		m.catchUpPeer(ctx, ss.pid, "requested")
	}
}

// catchUpPeer runs one reconciliation with pid unless one is running.
func (m *Mesh) catchUpPeer(ctx context.Context, pid peer.ID, why string) {
	if m.cfg.noCatchUp {
		return
	}
	m.mu.Lock()
	ps, ok := m.peers[pid]
	m.mu.Unlock()
	if !ok || !ps.catching.CompareAndSwap(false, true) {
		return
	}
	defer ps.catching.Store(false)
	ss := m.sessionFor(pid)
	if ss == nil {
		return
	}
	cu := &catchUp{m: m, ss: ss, start: time.Now(), why: why}
	defer m.sync.leave(cu)
	err := cu.reconcile(ctx, 0, math.MaxInt64, 0)
	if err == nil {
		err = cu.settle(ctx)
	}
	m.stats.catchUpRounds.Add(1)
	switch {
	case err != nil && ctx.Err() == nil:
		m.log.Info("catch-up interrupted", "peer", pid, "nodeId", ss.nodeID, "why", why, "new", cu.fetched, "err", err)
	case cu.fetched > 0:
		m.log.Info("catch-up done", "peer", pid, "nodeId", ss.nodeID, "why", why, "new", cu.fetched, "took", time.Since(cu.start).Round(time.Millisecond))
	default:
		m.log.Debug("catch-up: in sync", "peer", pid, "why", why, "took", time.Since(cu.start).Round(time.Millisecond))
	}
}

// reconcile compares the peer's digest of [from, to) at the level's width
// with ours, page by page, and descends into (or pulls) each bucket that
// differs.
func (cu *catchUp) reconcile(ctx context.Context, from, to int64, level int) error {
	width := catchUpWidths[level]
	for from < to {
		id := cu.ss.newReqID()
		p, err := marshalVendor(typeDigestReq, digestReq{ReqID: id, From: from, To: to, Width: width})
		if err != nil {
			return err
		}
		in, err := cu.ss.request(ctx, id, p)
		if err != nil {
			return err
		}
		theirs, ok := in.body.(*digestResp)
		if !ok {
			return fmt.Errorf("digest request answered with %s", in.typ)
		}
		// This page covers [from, end): up to the end of the last bucket
		// listed when more follow.
		end := to
		if theirs.More && len(theirs.Buckets) > 0 {
			last := theirs.Buckets[len(theirs.Buckets)-1].Start
			if e := last + width; e > from && e < to && e > last {
				end = e
			}
		}
		ours, _, err := cu.m.n.Digest(ctx, from, end, width, 0)
		if err != nil {
			return err
		}
		have := make(map[int64]node.Bucket, len(ours))
		for _, b := range ours {
			have[b.Start] = b
		}
		same := func(b bucketJSON) bool {
			o, ok := have[b.Start]
			return ok && o.Count == b.Count && hex.EncodeToString(o.Digest[:]) == b.Digest
		}
		if level == 0 {
			for _, b := range theirs.Buckets {
				if !same(b) {
					cu.expected.Add(int64(max(b.Count-have[b.Start].Count, 0)))
					cu.m.sync.join(cu)
				}
			}
		}
		for _, b := range theirs.Buckets {
			if same(b) {
				continue
			}
			lo, hi := max(b.Start, from), b.Start+width
			if hi < b.Start || hi > end { // overflow near MaxInt64, or past the page
				hi = end
			}
			if lo >= hi {
				continue
			}
			if b.Count <= leafKeys || level == len(catchUpWidths)-1 {
				err = cu.pullWindow(ctx, lo, hi)
			} else {
				err = cu.reconcile(ctx, lo, hi, level+1)
			}
			if err != nil {
				return err
			}
		}
		if end == to {
			return nil
		}
		from = end
	}
	return nil
}

// pullWindow lists the peer's keys in [from, to) page by page and fetches
// the ones this node lacks.
func (cu *catchUp) pullWindow(ctx context.Context, from, to int64) error {
	var afterAt int64
	var afterKey string
	for {
		id := cu.ss.newReqID()
		p, err := marshalVendor(typeKeysReq, keysReq{ReqID: id, From: from, To: to, AfterAt: afterAt, AfterKey: afterKey, Limit: keysPage})
		if err != nil {
			return err
		}
		in, err := cu.ss.request(ctx, id, p)
		if err != nil {
			return err
		}
		res, ok := in.body.(*keysResp)
		if !ok {
			return fmt.Errorf("keys request answered with %s", in.typ)
		}
		lack := make([]string, 0, len(res.Keys))
		for _, k := range res.Keys {
			lack = append(lack, k.Key)
		}
		if err := cu.pull(ctx, lack); err != nil {
			return err
		}
		if len(cu.later) >= maxLater {
			if err := cu.settle(ctx); err != nil {
				return err
			}
		}
		if !res.More || len(res.Keys) == 0 {
			return nil
		}
		last := res.Keys[len(res.Keys)-1]
		if last.At < afterAt || (last.At == afterAt && last.Key <= afterKey) {
			return errors.New("keys answer does not advance") // a broken or hostile peer
		}
		afterAt, afterKey = last.At, last.Key
	}
}

// pull fetches from the peer those of keys this node lacks and no other
// catch-up is fetching; the others go to cu.later.
func (cu *catchUp) pull(ctx context.Context, keys []string) error {
	lack := cu.lacking(ctx, keys)
	if len(lack) == 0 {
		return nil
	}
	mine, done, taken := cu.m.claims.take(lack)
	cu.later = append(cu.later, taken...)
	defer cu.m.claims.release(mine, done)
	// Another catch-up may have stored some between the look and the claim.
	if mine = cu.lacking(ctx, mine); len(mine) == 0 {
		return nil
	}
	_, _, n, err := cu.m.fetchFrom(ctx, cu.ss, mine, viaCatchUp, 0)
	before := cu.pulled
	cu.pulled += len(mine)
	cu.fetched += n
	if cu.pulled/progressEvery != before/progressEvery {
		cu.m.log.Info("catch-up progress", "peer", cu.ss.pid, "why", cu.why, "new", cu.fetched, "elapsed", time.Since(cu.start).Round(time.Millisecond))
	}
	return err
}

// settle waits for the keys left to other catch-ups and fetches from this
// peer the ones still missing once they are released, until none is left.
func (cu *catchUp) settle(ctx context.Context) error {
	for len(cu.later) > 0 {
		keys := cu.later
		cu.later = nil
		if err := cu.m.claims.wait(ctx, keys); err != nil {
			return err
		}
		if err := cu.pull(ctx, keys); err != nil {
			return err
		}
	}
	return nil
}

// lacking is the keys of keys this node does not hold.
func (cu *catchUp) lacking(ctx context.Context, keys []string) []string {
	var out []string
	for _, k := range keys {
		if has, err := cu.m.n.Has(ctx, k); err == nil && !has {
			out = append(out, k)
		}
	}
	return out
}

// ---- serving ----

func (ss *session) serveDigest(ctx context.Context, req *digestReq) {
	ss.m.stats.digestServed.Add(1)
	res := digestResp{ReqID: req.ReqID, Buckets: []bucketJSON{}}
	if req.Width >= minDigestSpan && req.To > req.From {
		bs, more, err := ss.m.n.Digest(ctx, max(req.From, 0), req.To, req.Width, digestPage)
		if err == nil {
			for _, b := range bs {
				res.Buckets = append(res.Buckets, bucketJSON{Start: b.Start, Count: b.Count, Digest: hex.EncodeToString(b.Digest[:])})
			}
			res.More = more
			if more {
				ss.m.stats.serveTruncated.Add(1)
			}
		}
	}
	if p, err := marshalVendor(typeDigest, res); err == nil {
		ss.answer(ctx, p)
	}
}

// serveKeys lists the keys the requester may fetch (node.ScanServable) in
// [from, to) after (afterAt, afterKey), at most keysPage of them.
func (ss *session) serveKeys(ctx context.Context, req *keysReq) {
	m := ss.m
	limit := req.Limit
	if limit <= 0 || limit > keysPage {
		limit = keysPage
	}
	res := keysResp{ReqID: req.ReqID, Keys: []keyAt{}}
	from := max(req.From, req.AfterAt, 0)
	err := m.n.ScanServable(ctx, ss.nodeID, from, req.To, func(key string, at int64) error {
		if req.AfterKey != "" && at == req.AfterAt && key <= req.AfterKey {
			return nil
		}
		if len(res.Keys) >= limit {
			res.More = true
			return errStop
		}
		res.Keys = append(res.Keys, keyAt{Key: key, At: at})
		return nil
	})
	if err != nil && !errors.Is(err, errStop) {
		m.log.Debug("serving keys failed", "err", err)
	}
	if p, err := marshalVendor(typeKeys, res); err == nil {
		ss.answer(ctx, p)
	}
}
