package cgp_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cmbnode/cmbnode/node/cgp"
)

// hubStore holds one record with n remixes, each remixed once more: an
// anchor on the hub reaches 2n records within two hops.
func hubStore(t testing.TB, n int) *cgp.MemBackend {
	t.Helper()
	b := cgp.NewMemBackend()
	at := ms("2026-07-01T00:00:00Z")
	put := func(r cgp.Record) {
		if err := b.Put(r); err != nil {
			t.Fatal(err)
		}
	}
	put(cgp.Record{Key: "cmb1-hub", Group: "lab", CreatedBy: "n1", CreatedAt: at, Fields: cgp.Fields{Focus: "the hub decision"}})
	for i := range n {
		k := fmt.Sprintf("cmb1-kid%05d", i)
		put(cgp.Record{Key: k, Group: "lab", CreatedBy: "n2", CreatedAt: at.Add(time.Duration(i+1) * time.Second),
			Parents: []string{"cmb1-hub"}, Fields: cgp.Fields{Focus: "remix " + k}})
		put(cgp.Record{Key: k + "-g", Group: "lab", CreatedBy: "n3", CreatedAt: at.Add(time.Duration(i+1)*time.Second + time.Millisecond),
			Parents: []string{k}, Fields: cgp.Fields{Focus: "grand remix " + k}})
	}
	return b
}

func decode(t testing.TB, js string) *cgp.ContextQuery {
	t.Helper()
	q, err := cgp.DecodeQuery([]byte(js))
	if err != nil {
		t.Fatalf("decode %s: %v", js, err)
	}
	return q
}

func anchorsQuery(n int) string {
	a := make([]string, n)
	for i := range a {
		a[i] = fmt.Sprintf("mmp://lab/cmb/cmb1-kid%05d", i)
	}
	js, _ := json.Marshal(a)
	return `{"goal":"remix","max_frames":8,"max_tokens":4000,"anchors":` + string(js) + `}`
}

func wantCode(t testing.TB, err error, code, says string) {
	t.Helper()
	var pe *cgp.Error
	if !errors.As(err, &pe) || pe.Code != code || !strings.Contains(pe.Message, says) {
		t.Fatalf("want %s saying %q, got %v", code, says, err)
	}
}

// Issue #24: a query with 12k anchors took 7.6 s and 12 MB. Anchors are
// capped per query with a bad_request naming the cap; at the cap, the
// query is answered.
func TestAnchorsPerQueryAreCapped(t *testing.T) {
	e := mustEngine(t, hubStore(t, 100))
	_, err := e.Query(context.Background(), decode(t, anchorsQuery(12000)))
	wantCode(t, err, cgp.CodeBadRequest, "at most 64")
	res, err := e.Query(context.Background(), decode(t, anchorsQuery(64)))
	if err != nil || len(res.Frames) == 0 {
		t.Fatalf("query at the anchor cap: %v, %d frames", err, len(res.Frames))
	}
	if st := e.Stats(); st.AnchorsRefused != 1 || st.Queries != 2 {
		t.Fatalf("stats: %+v", st)
	}
}

// countingBackend counts the store reads a query makes.
type countingBackend struct {
	*cgp.MemBackend
	gets atomic.Int64
	// onGet, if set, runs at each Get with its number.
	onGet func(ctx context.Context, n int64)
}

func (c *countingBackend) Get(ctx context.Context, key string) (cgp.Record, bool, error) {
	n := c.gets.Add(1)
	if c.onGet != nil {
		c.onGet(ctx, n)
	}
	return c.MemBackend.Get(ctx, key)
}

// An anchor on a record with thousands of remixes reads a bounded part
// of its neighbourhood, nearest first; the result is still anchored and
// says it left candidates out.
func TestAnchorWalkIsBounded(t *testing.T) {
	b := &countingBackend{MemBackend: hubStore(t, 3000)}
	e := mustEngine(t, b)
	res := query(t, e, `{"goal":"nothing matches this","max_frames":8,"max_tokens":100000,"anchors":["mmp://lab/cmb/cmb1-hub"]}`)
	// The walk reads at most 256 records; each candidate then reads itself
	// and its thread, and the hub's own frames read its 3,000 remixes (its
	// relations and episode): about 4,000 reads. Walking the whole
	// neighbourhood, as before, made every one of its 6,000 records a
	// candidate: over 30,000.
	if n := b.gets.Load(); n > 10000 {
		t.Fatalf("one anchored query read the store %d times", n)
	}
	const anchor = "mmp://lab/cmb/cmb1-hub"
	anchored := false // in the G4 sense: the frame's uri or a relation's target
	for _, f := range res.Frames {
		anchored = anchored || f.URI == anchor
		for _, r := range f.Relations {
			anchored = anchored || r.TargetURI == anchor
		}
	}
	if !anchored || !res.Truncated || res.DroppedEstimate == nil || *res.DroppedEstimate < 3000 {
		t.Fatalf("anchored=%v truncated=%v dropped=%v", anchored, res.Truncated, res.DroppedEstimate)
	}
}

// A query stops at its deadline: once it has passed, the engine makes no
// more store reads and answers `unavailable` naming the deadline. The
// read that sees the deadline come stands for a slow store.
func TestQueryHonoursItsDeadline(t *testing.T) {
	b := &countingBackend{MemBackend: hubStore(t, 3000)}
	var atDeadline atomic.Int64
	b.onGet = func(ctx context.Context, n int64) {
		if n == 100 {
			<-ctx.Done()
			atDeadline.Store(n)
		}
	}
	e := mustEngine(t, b)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, err := e.Query(ctx, decode(t, `{"goal":"remix","max_frames":8,"max_tokens":4000,"anchors":["mmp://lab/cmb/cmb1-hub"]}`))
	wantCode(t, err, cgp.CodeUnavailable, "deadline")
	if after := b.gets.Load() - atDeadline.Load(); atDeadline.Load() == 0 || after > 1 {
		t.Fatalf("%d store reads after the deadline", after)
	}
	if st := e.Stats(); st.DeadlineExceeded != 1 {
		t.Fatalf("stats: %+v", st)
	}
}

// The engine's own RequestTimeout bounds a request whose caller set no
// deadline (the socket's query has none of its own).
func TestRequestTimeoutAppliesWithoutACallerDeadline(t *testing.T) {
	b := &countingBackend{MemBackend: smallStore()}
	b.onGet = func(ctx context.Context, _ int64) { <-ctx.Done() }
	e, err := cgp.NewEngine(cgp.Config{Backend: b, Group: "lab", RequestTimeout: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	_, err = e.Query(context.Background(), decode(t, `{"goal":"retry","max_frames":4,"max_tokens":4000}`))
	wantCode(t, err, cgp.CodeUnavailable, "deadline")
}

// gateBackend holds every Search until open is closed, and records how
// many were inside at once.
type gateBackend struct {
	*cgp.MemBackend
	open     chan struct{}
	in, most atomic.Int64
	entered  chan struct{}
}

func (g *gateBackend) Search(ctx context.Context, text string, o cgp.SearchOptions) (cgp.SearchResult, error) {
	n := g.in.Add(1)
	defer g.in.Add(-1)
	for {
		m := g.most.Load()
		if n <= m || g.most.CompareAndSwap(m, n) {
			break
		}
	}
	g.entered <- struct{}{}
	if !strings.Contains(text, "honest") {
		<-g.open
	}
	return g.MemBackend.Search(ctx, text, o)
}

// Thirty heavy queries at once run MaxConcurrent at a time. One that
// cannot get a turn before its deadline is told the provider is busy;
// once the heavy ones finish, an honest query is answered.
func TestConcurrentQueriesAreBounded(t *testing.T) {
	g := &gateBackend{MemBackend: smallStore(), open: make(chan struct{}), entered: make(chan struct{}, 64)}
	e, err := cgp.NewEngine(cgp.Config{Backend: g, Group: "lab", MaxConcurrent: 2})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 30)
	for range 30 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := e.Query(context.Background(), decode(t, `{"goal":"heavy retry","max_frames":4,"max_tokens":4000}`))
			errs <- err
		}()
	}
	<-g.entered
	<-g.entered
	// Were there no bound, all thirty would be inside by now.
	time.Sleep(200 * time.Millisecond)
	if n := g.most.Load(); n != 2 {
		t.Fatalf("%d queries ran at once, want 2", n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err = e.Query(ctx, decode(t, `{"goal":"honest retry","max_frames":4,"max_tokens":4000}`))
	wantCode(t, err, cgp.CodeUnavailable, "busy")

	close(g.open)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("heavy query: %v", err)
		}
	}
	if n := g.most.Load(); n != 2 {
		t.Fatalf("%d queries ran at once, want 2", n)
	}
	res := query(t, e, `{"goal":"honest retry","max_frames":4,"max_tokens":4000}`)
	if len(res.Frames) == 0 {
		t.Fatal("honest query answered with no frames")
	}
	if st := e.Stats(); st.Busy != 1 || st.Queries != 32 {
		t.Fatalf("stats: %+v", st)
	}
}

// During a flood of the heaviest queries admitted (64 anchors on a hub's
// remixes) and refused ones (12,000 anchors), an honest query is still
// answered within the default deadline.
func TestHonestQueryDuringAnAnchorFlood(t *testing.T) {
	e := mustEngine(t, hubStore(t, 500))
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var heavy, refused atomic.Int64
	for i := range 30 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			js := anchorsQuery(64)
			if i%2 == 1 {
				js = anchorsQuery(12000)
			}
			q := decode(t, js)
			for {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := e.Query(context.Background(), q); err != nil {
					refused.Add(1)
				} else {
					heavy.Add(1)
				}
			}
		}()
	}
	defer func() { close(stop); wg.Wait() }()
	waitUntil(t, func() bool { return heavy.Load() >= 30 && refused.Load() >= 30 })
	res, err := e.Query(context.Background(), decode(t, `{"goal":"hub decision","max_frames":4,"max_tokens":4000}`))
	if err != nil || len(res.Frames) == 0 {
		t.Fatalf("honest query during the flood: %v", err)
	}
}

func waitUntil(t testing.TB, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatal("gave up waiting")
}

// A result is packed within the byte budget its transport gives: frames
// that would not fit are left out and counted, as a token budget's are.
func TestQueryWithinAByteBudgetTruncates(t *testing.T) {
	b := cgp.NewMemBackend()
	for i := range 40 {
		if err := b.Put(cgp.Record{Key: fmt.Sprintf("cmb1-big%02d", i), Group: "lab", CreatedBy: "n1",
			CreatedAt: ms("2026-07-01T00:00:00Z").Add(time.Duration(i) * time.Minute),
			Fields:    cgp.Fields{Focus: "big note", Issue: strings.Repeat("x", 60<<10)}}); err != nil {
			t.Fatal(err)
		}
	}
	e := mustEngine(t, b)
	q := decode(t, `{"goal":"big note","kinds":["memory"],"max_frames":100,"max_tokens":10000000}`)
	full, err := e.Query(context.Background(), q)
	if err != nil || len(full.Frames) != 40 || full.Truncated {
		t.Fatalf("under the engine's own budget: %v, %d frames, truncated %v", err, len(full.Frames), full.Truncated)
	}
	const budget = 1 << 20
	res, err := e.QueryWithin(context.Background(), q, budget)
	if err != nil {
		t.Fatal(err)
	}
	enc, _ := json.Marshal(res)
	if len(enc) > budget || len(res.Frames) == 0 || !res.Truncated || res.DroppedEstimate == nil ||
		int(*res.DroppedEstimate) != 40-len(res.Frames) {
		t.Fatalf("%d bytes, %d frames, truncated %v, dropped %v", len(enc), len(res.Frames), res.Truncated, res.DroppedEstimate)
	}
	if st := e.Stats(); st.BytesTruncated != 1 {
		t.Fatalf("stats: %+v", st)
	}
}
