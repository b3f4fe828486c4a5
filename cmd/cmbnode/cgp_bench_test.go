package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cmbnode/cmbnode/cmb"
	"github.com/cmbnode/cmbnode/lineage"
	"github.com/cmbnode/cmbnode/node"
	"github.com/cmbnode/cmbnode/node/identity"
	"github.com/cmbnode/cmbnode/store"
)

// Query latency of the CGP provider over a realistic store, end to end: the
// host writes one envelope line to `cmbnode cgp`, which relays it over the
// socket to the daemon, whose engine searches, renders, packs and signs; the
// timer stops when the reply line is read. BenchmarkCGPQueryViaHTTP measures
// the daemon's --cgp-http binding the same way (one POST per query).
//
// Each sub-benchmark runs cgpBenchQueries distinct queries per operation
// (max_frames 16, max_tokens 4000, goals drawn from the seeded vocabulary),
// one at a time, and reports the percentiles over every round trip it timed,
// so p50/p99 do not depend on b.N. ns/op is the time for the whole set.
//
// Seeding: the records are real signed v1.1 CMBs (cmb.Build) from three
// authors, ~200-600 bytes of text over the seven fields, a quarter of them
// remixes forming threads of up to 8, a few with two parents. They are
// built on all cores and written with store.PutMany in large batches into a
// home opened in-process (node.Open), then the daemon is started on it. A
// seeded home is built once per size per `go test` run and shared by both
// benchmarks; it lives in the directory of the test binary build, which
// TestMain removes. Seeding and daemon start-up are timed in the -v log.

const (
	cgpBenchQueries   = 300
	cgpBenchWarmup    = 30
	cgpBenchMaxFrames = 16
	cgpBenchMaxTokens = 4000
)

var cgpBenchSizes = []int{10_000, 100_000}

func BenchmarkCGPQueryViaStdio(b *testing.B) {
	for _, n := range cgpBenchSizes {
		b.Run(fmt.Sprintf("records=%d", n), func(b *testing.B) {
			home := seededBenchHome(b, n)
			stopAtCleanup(b, startBenchDaemon(b, home))
			c := startCGPShim(b, home)
			benchQueries(b, n, c.roundTrip)
		})
	}
}

func BenchmarkCGPQueryViaHTTP(b *testing.B) {
	for _, n := range cgpBenchSizes {
		b.Run(fmt.Sprintf("records=%d", n), func(b *testing.B) {
			home := seededBenchHome(b, n)
			addr := loopbackAddr(b)
			stopAtCleanup(b, startBenchDaemon(b, home, "--cgp-http", addr))
			url := "http://" + addr + "/contextgraph"
			bearer := "Bearer " + readToken(b, home)
			client := &http.Client{Timeout: 30 * time.Second}
			b.Cleanup(client.CloseIdleConnections)
			benchQueries(b, n, func(line []byte) ([]byte, error) {
				req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(line))
				if err != nil {
					return nil, err
				}
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Authorization", bearer)
				resp, err := client.Do(req)
				if err != nil {
					return nil, err
				}
				defer resp.Body.Close()
				body, err := io.ReadAll(resp.Body)
				if err == nil && resp.StatusCode != http.StatusOK {
					err = fmt.Errorf("HTTP %s: %s", resp.Status, body)
				}
				return body, err
			})
		})
	}
}

// benchQueries times cgpBenchQueries round trips per operation after an
// untimed warm-up, and reports p50/p99 latency and frames per reply.
func benchQueries(b *testing.B, records int, roundTrip func([]byte) ([]byte, error)) {
	b.Helper()
	queries := benchQueryLines(cgpBenchQueries + cgpBenchWarmup)
	warm, queries := queries[:cgpBenchWarmup], queries[cgpBenchWarmup:]
	ask := func(line []byte) (frames, tokens int, truncated bool) {
		reply, err := roundTrip(line)
		if err != nil {
			b.Fatalf("query %s: %v", line, err)
		}
		var env struct {
			Type   string `json:"type"`
			Result struct {
				Frames []struct {
					Kind      string `json:"kind"`
					TokenCost int    `json:"token_cost"`
				} `json:"frames"`
				Truncated bool `json:"truncated"`
			} `json:"result"`
		}
		if err := json.Unmarshal(reply, &env); err != nil || env.Type != "frames" {
			b.Fatalf("query %s: reply is not a frames envelope (%v): %.500s", line, err, reply)
		}
		for _, f := range env.Result.Frames {
			tokens += f.TokenCost
		}
		if len(env.Result.Frames) > cgpBenchMaxFrames || tokens > cgpBenchMaxTokens {
			b.Fatalf("query %s: %d frames, %d tokens exceed the budget", line, len(env.Result.Frames), tokens)
		}
		return len(env.Result.Frames), tokens, env.Result.Truncated
	}
	for _, q := range warm {
		ask(q)
	}
	var (
		lat                    []time.Duration
		frames, tokens, ntrunc int
		empty                  int
	)
	b.ResetTimer()
	for b.Loop() {
		for _, q := range queries {
			t0 := time.Now()
			f, tok, tr := ask(q)
			lat = append(lat, time.Since(t0))
			frames += f
			tokens += tok
			if tr {
				ntrunc++
			}
			if f == 0 {
				empty++
			}
		}
	}
	b.StopTimer()
	slices.Sort(lat)
	pct := func(p float64) float64 {
		return float64(lat[int(p*float64(len(lat)-1)+0.5)].Microseconds()) / 1000
	}
	n := float64(len(lat))
	b.ReportMetric(pct(0.50), "p50-ms")
	b.ReportMetric(pct(0.99), "p99-ms")
	b.ReportMetric(float64(frames)/n, "frames/reply")
	b.ReportMetric(float64(tokens)/n, "tokens/reply")
	b.Logf("%d stored, %d round trips: p50 %.2f ms, p90 %.2f ms, p99 %.2f ms, max %.2f ms; %.1f frames and %.0f tokens per reply; %.0f%% truncated, %d empty",
		records, len(lat), pct(0.50), pct(0.90), pct(0.99), pct(1), float64(frames)/n, float64(tokens)/n, 100*float64(ntrunc)/n, empty)
}

// benchQueryLines returns n distinct query envelopes with goals drawn from
// the seeding vocabulary: topic names, topic terms, issue words and mixes.
func benchQueryLines(n int) [][]byte {
	r := rand.New(rand.NewPCG(7, 11))
	seen := map[string]bool{}
	var out [][]byte
	for len(out) < n {
		t := benchTopics[r.IntN(len(benchTopics))]
		var goal string
		switch r.IntN(6) {
		case 0:
			goal = t.name
		case 1:
			goal = pick(r, t.terms) + " " + pick(r, t.terms)
		case 2:
			goal = t.name + " " + pick(r, benchProblems)
		case 3:
			goal = "why did the " + pick(r, t.terms) + " " + pick(r, benchProblems)
		case 4:
			u := benchTopics[r.IntN(len(benchTopics))]
			goal = pick(r, t.terms) + " and " + pick(r, u.terms)
		default:
			goal = "what did we decide about " + pick(r, t.terms) + " for " + pick(r, benchPlaces)
		}
		if seen[goal] {
			continue
		}
		seen[goal] = true
		line, _ := json.Marshal(map[string]any{
			"type": "query", "id": fmt.Sprintf("q%d", len(out)),
			"query": map[string]any{"goal": goal, "max_frames": cgpBenchMaxFrames, "max_tokens": cgpBenchMaxTokens},
		})
		out = append(out, line)
	}
	return out
}

// cgpShim is a running `cmbnode cgp` after its handshake.
type cgpShim struct {
	in  io.WriteCloser
	out *bufio.Reader
}

func startCGPShim(b *testing.B, home string) *cgpShim {
	b.Helper()
	cmd := exec.Command(binary(b), "cgp", "--home", home)
	cmd.Env = append(os.Environ(), "CMBNODE_HOME=")
	logs := &lockedBuffer{}
	cmd.Stderr = logs
	in, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	b.Cleanup(func() {
		in.Close() // EOF: the shim exits 0
		select {
		case err := <-exited:
			if err != nil {
				b.Errorf("cmbnode cgp exited: %v\n%s", err, logs)
			}
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-exited
			b.Errorf("cmbnode cgp ignored EOF\n%s", logs)
		}
	})
	c := &cgpShim{in: in, out: bufio.NewReaderSize(out, 1<<20)}
	ack, err := c.roundTrip([]byte(`{"type":"handshake","protocol_version":"contextgraph/1.0"}`))
	if err != nil || !bytes.Contains(ack, []byte(`"handshake_ack"`)) {
		b.Fatalf("handshake: %v %s\n%s", err, ack, logs)
	}
	return c
}

// roundTrip writes one envelope line and reads the reply line.
func (c *cgpShim) roundTrip(line []byte) ([]byte, error) {
	if _, err := c.in.Write(append(line[:len(line):len(line)], '\n')); err != nil {
		return nil, err
	}
	return c.out.ReadBytes('\n')
}

func loopbackAddr(tb testing.TB) string {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func startBenchDaemon(b *testing.B, home string, args ...string) *daemonProc {
	b.Helper()
	d := startDaemon(b, home, args...)
	b.Logf("daemon ready in %v", d.ready.Round(time.Millisecond))
	return d
}

// stopAtCleanup stops the daemon with SIGTERM so the shared home is closed
// cleanly for the next benchmark (startDaemon's own cleanup SIGKILLs, and
// is then a no-op).
func stopAtCleanup(b *testing.B, d *daemonProc) {
	b.Cleanup(func() {
		if err := d.stop(b, syscall.SIGTERM); err != nil {
			b.Errorf("daemon exit: %v\n%s", err, d.logs)
		}
	})
}

// The seeded homes, one per size, shared by every benchmark in this run.
var benchHomes struct {
	mu sync.Mutex
	m  map[int]string
}

// seededBenchHome returns a home holding n records, seeding it on first use.
// It lives next to the test build of the binary, so TestMain removes it.
func seededBenchHome(b *testing.B, n int) string {
	b.Helper()
	benchHomes.mu.Lock()
	defer benchHomes.mu.Unlock()
	if h, ok := benchHomes.m[n]; ok {
		return h
	}
	root, err := os.MkdirTemp(filepath.Dir(binary(b)), "bench-")
	if err != nil {
		b.Fatal(err)
	}
	home := filepath.Join(root, "home")
	t0 := time.Now()
	if err := seedBenchHome(root, home, n); err != nil {
		os.RemoveAll(root)
		b.Fatalf("seed %d records: %v", n, err)
	}
	b.Logf("seeded %d records in %v", n, time.Since(t0).Round(time.Millisecond))
	if benchHomes.m == nil {
		benchHomes.m = map[int]string{}
	}
	benchHomes.m[n] = home
	return home
}

// seedBenchHome creates the node's identity in home and writes n records.
func seedBenchHome(root, home string, n int) error {
	id, err := identity.Create(home, "bench-node", nil)
	if err != nil {
		return err
	}
	// Two peers whose records this node holds, pinned in its roster so
	// their display names resolve.
	authors := []*identity.Identity{id}
	for _, name := range []string{"ada", "grace"} {
		p, err := identity.Create(filepath.Join(root, name), name, nil)
		if err != nil {
			return err
		}
		authors = append(authors, p)
	}
	nd, err := node.Open(node.Options{Home: home, Group: "default", Identity: id})
	if err != nil {
		return err
	}
	defer nd.Close()
	st := nd.Store()
	ctx := context.Background()
	now := time.Now()
	for _, p := range authors[1:] {
		if _, err := st.PutPeer(ctx, store.Peer{NodeID: strings.ToLower(p.NodeID), Ed25519: p.PublicKey(),
			X25519: p.X25519.PublicKey().Bytes(), Name: p.Name, FirstSeen: now, LastSeen: now}); err != nil {
			return err
		}
	}

	plan := planBenchRecords(n, now)
	// Build on every core. A record waits only for its parents' keys, which
	// were claimed earlier, so claiming in index order cannot deadlock.
	items := make([]store.Item, n)
	recs := make([]*cmb.Record, n)
	done := make([]chan struct{}, n)
	for i := range done {
		done[i] = make(chan struct{})
	}
	var (
		next     atomic.Int64
		firstErr error
		errOnce  sync.Once
		wg       sync.WaitGroup
	)
	for range runtime.GOMAXPROCS(0) {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				p := &plan[i]
				d := cmb.Draft{Fields: p.fields, Group: "default", CreatedBy: authors[p.author].NodeID, CreatedAt: p.createdAt}
				var pa [][]string
				for _, pi := range p.parents {
					<-done[pi]
					pr := recs[pi]
					if pr == nil {
						close(done[i])
						return
					}
					d.Parents = append(d.Parents, pr.Key)
					pa = append(pa, pr.Ancestors())
				}
				if len(d.Parents) > 0 {
					// As node.Remember computes them.
					d.Ancestors = lineage.Ancestors(d.Parents, pa)
				}
				rec, err := cmb.Build(d, authors[p.author].Ed25519)
				if err != nil {
					errOnce.Do(func() { firstErr = fmt.Errorf("record %d: %w", i, err) })
					close(done[i])
					return
				}
				recs[i] = rec
				close(done[i])
				source := node.SourceLocal
				if p.author > 0 {
					source = strings.ToLower(rec.CreatedBy)
				}
				items[i] = store.Item{
					Entry: store.Entry{Key: rec.Key, CreatedBy: rec.CreatedBy, CreatedAt: rec.CreatedAt, Group: rec.Group,
						Parents: rec.Parents(), Ancestors: rec.Ancestors(), Texts: rec.Fields.Texts(), Raw: rec.Encode()},
					Meta: store.Meta{StoredAt: p.storedAt, Source: source, Verified: true},
				}
			}
		})
	}
	wg.Wait()
	if firstErr != nil {
		return firstErr
	}
	// Large batches from two writers keep the single store writer busy.
	const batch = 4096
	var werr error
	var wmu sync.Mutex
	sem := make(chan struct{}, 2)
	for lo := 0; lo < n; lo += batch {
		chunk := items[lo:min(lo+batch, n)]
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			res, err := st.PutMany(ctx, chunk)
			if err == nil {
				for _, r := range res {
					if r.Err != nil || r.Duplicate {
						err = fmt.Errorf("put %s: duplicate=%v err=%v", r.Record.Key, r.Duplicate, r.Err)
						break
					}
				}
			}
			if err != nil {
				wmu.Lock()
				werr = err
				wmu.Unlock()
			}
		})
	}
	wg.Wait()
	if werr != nil {
		return werr
	}
	if got := st.Count(); got != n {
		return fmt.Errorf("store holds %d records, want %d", got, n)
	}
	return nil
}

type plannedRecord struct {
	author    int
	createdAt int64
	storedAt  time.Time
	parents   []int
	fields    cmb.Fields
}

// planBenchRecords lays out n records over the last 90 days, deterministic
// for n. About a quarter continue an open thread of their topic (threads of
// up to 8); one remix in twenty also cites a recent record of another topic.
func planBenchRecords(n int, now time.Time) []plannedRecord {
	r := rand.New(rand.NewPCG(uint64(n), 42))
	span := int64(90 * 24 * time.Hour / time.Millisecond)
	start := now.UnixMilli() - span
	plan := make([]plannedRecord, n)
	type thread struct{ tip, length int }
	open := make([]thread, len(benchTopics))
	for i := range open {
		open[i].tip = -1
	}
	lastOf := make([]int, len(benchTopics))
	for i := range lastOf {
		lastOf[i] = -1
	}
	for i := range plan {
		ti := topicIndex(r)
		t := &benchTopics[ti]
		p := &plan[i]
		p.author = []int{0, 0, 1, 2}[r.IntN(4)]
		p.createdAt = start + int64(i)*span/int64(n) + r.Int64N(60_000)
		p.storedAt = time.UnixMilli(p.createdAt + 50 + r.Int64N(5_000))
		th := &open[ti]
		if th.tip >= 0 && th.length < 8 && r.IntN(4) == 0 {
			p.parents = []int{th.tip}
			if o := lastOf[r.IntN(len(lastOf))]; o >= 0 && o != th.tip && r.IntN(20) == 0 {
				p.parents = append(p.parents, o)
			}
			th.tip, th.length = i, th.length+1
		} else if r.IntN(3) == 0 {
			*th = thread{tip: i, length: 1}
		}
		lastOf[ti] = i
		p.fields = benchFields(r, t, i)
	}
	return plan
}

// topicIndex is skewed: a few topics are busy, most are quieter.
func topicIndex(r *rand.Rand) int {
	if r.IntN(3) == 0 {
		return r.IntN(4)
	}
	return r.IntN(len(benchTopics))
}

func pick(r *rand.Rand, l []string) string { return l[r.IntN(len(l))] }

func benchFields(r *rand.Rand, t *benchTopic, i int) cmb.Fields {
	var f cmb.Fields
	term := func() string { return pick(r, t.terms) }
	place := pick(r, benchPlaces)
	f[cmb.Focus].Text = fmt.Sprintf("%s: %s the %s %s for %s", t.name, pick(r, benchVerbs), term(), term(), place)
	f[cmb.Issue].Text = fmt.Sprintf("the %s %s after %s changed; %d of %d %s affected, %s",
		term(), pick(r, benchProblems), term(), 1+r.IntN(40), 50+r.IntN(950), pick(r, benchUnits), pick(r, benchFiller))
	f[cmb.Intent].Text = fmt.Sprintf("%s the %s before %s, then %s", pick(r, benchVerbs), term(), pick(r, benchDeadlines), pick(r, benchFiller))
	if r.IntN(2) == 0 {
		f[cmb.Motivation].Text = fmt.Sprintf("%s depends on the %s and %s", pick(r, benchStakes), term(), pick(r, benchFiller))
	}
	f[cmb.Commitment].Text = fmt.Sprintf("%s owns the %s %s; review %s (ticket %s-%d)", pick(r, benchOwners), term(), pick(r, benchArtifacts), pick(r, benchDeadlines), t.ticket, 100+i%900)
	if r.IntN(3) > 0 {
		f[cmb.Perspective].Text = fmt.Sprintf("seen from the %s team: %s", pick(r, benchTeams), pick(r, benchFiller))
	}
	m := benchMoods[r.IntN(len(benchMoods))]
	v, a := m.v+(r.Float64()-0.5)/5, m.a+(r.Float64()-0.5)/5
	f[cmb.Mood] = cmb.Field{Text: m.text, Valence: &v, Arousal: &a}
	return f
}

type benchTopic struct {
	name, ticket string
	terms        []string
}

var benchTopics = []benchTopic{
	{"parser rollout", "PRS", []string{"tokenizer", "grammar", "feature flag", "canary", "fallback path", "error recovery", "AST cache"}},
	{"latency budget", "LAT", []string{"p99 latency", "tail latency", "connection pool", "timeout", "retry budget", "hedged request"}},
	{"schema migration", "MIG", []string{"column backfill", "migration script", "foreign key", "online DDL", "shadow table", "rollback plan"}},
	{"incident review", "INC", []string{"postmortem", "pager alert", "root cause", "timeline", "action item", "blast radius"}},
	{"release notes", "REL", []string{"changelog", "version bump", "breaking change", "deprecation notice", "upgrade guide"}},
	{"cache eviction", "CAC", []string{"LRU policy", "hit ratio", "warmup", "TTL", "memory pressure", "hot keys"}},
	{"index rebuild", "IDX", []string{"posting list", "compaction", "segment merge", "tokenizer", "reindex job", "shard"}},
	{"mesh gossip", "MSH", []string{"gossip fanout", "peer discovery", "heartbeat", "partition", "catch-up sync", "backpressure"}},
	{"auth tokens", "AUT", []string{"token rotation", "signing key", "refresh flow", "scope check", "session expiry"}},
	{"billing export", "BIL", []string{"invoice batch", "currency rounding", "ledger", "export job", "reconciliation"}},
	{"mobile onboarding", "MOB", []string{"signup funnel", "push permission", "deep link", "tutorial screen", "crash report"}},
	{"search relevance", "SRC", []string{"BM25 weights", "synonym list", "ranking model", "click logs", "query rewrite"}},
	{"storage quota", "STO", []string{"disk usage", "retention policy", "purge job", "compression", "cold tier"}},
	{"deploy pipeline", "DEP", []string{"build cache", "integration test", "artifact registry", "blue green deploy", "smoke test"}},
	{"data privacy", "PRV", []string{"consent record", "PII scrubber", "deletion request", "audit log", "encryption at rest"}},
	{"observability", "OBS", []string{"trace sampling", "metrics cardinality", "log volume", "dashboard", "alert threshold"}},
	{"team offsite", "OFF", []string{"agenda", "venue booking", "travel budget", "workshop", "retro notes"}},
	{"api versioning", "API", []string{"v2 endpoint", "client SDK", "sunset header", "compatibility shim", "OpenAPI spec"}},
	{"load testing", "LDT", []string{"traffic replay", "soak test", "ramp profile", "saturation point", "capacity plan"}},
	{"dependency upgrade", "DPU", []string{"lockfile", "security advisory", "transitive dependency", "vendored module", "go toolchain"}},
}

var (
	benchVerbs     = []string{"reviewing", "drafting", "measuring", "rolling back", "hardening", "profiling", "documenting", "splitting", "re-testing", "pairing on"}
	benchPlaces    = []string{"the eu-west cluster", "the staging fleet", "the ios client", "the batch workers", "the public API", "the on-call rotation", "the nightly build", "the design review"}
	benchProblems  = []string{"regressed", "flaked", "timed out", "double counted", "leaked memory", "dropped events", "stalled", "spiked", "went stale", "diverged"}
	benchUnits     = []string{"requests", "jobs", "shards", "users", "builds", "nodes", "tenants"}
	benchFiller    = []string{"which nobody expected", "as the dashboard showed yesterday", "though the numbers are still noisy", "according to the on-call notes", "after two quiet weeks", "and the fix looks small", "so we paused the rollout", "but only under load"}
	benchDeadlines = []string{"Friday", "the next release", "end of sprint", "the quarterly review", "tomorrow's standup", "the freeze"}
	benchStakes    = []string{"the launch date", "customer trust", "the SLO", "the audit", "our error budget", "the migration window"}
	benchOwners    = []string{"owner-ada", "owner-grace", "owner-linus", "owner-barbara", "owner-ken", "owner-margaret"}
	benchArtifacts = []string{"runbook", "design doc", "dashboard", "patch", "test plan", "checklist"}
	benchTeams     = []string{"platform", "mobile", "data", "security", "support", "infra", "product"}
	benchMoods     = []struct {
		text string
		v, a float64
	}{{"steady", 0.2, -0.1}, {"worried", -0.5, 0.5}, {"relieved", 0.6, -0.3}, {"frustrated", -0.6, 0.6}, {"curious", 0.4, 0.3}, {"tired", -0.2, -0.6}}
)
