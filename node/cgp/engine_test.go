package cgp_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/cmbnode/cmbnode/node/cgp"
	"github.com/cmbnode/cmbnode/node/cgp/cgptest"
)

func mustEngine(t testing.TB, b cgp.Backend) *cgp.Engine {
	t.Helper()
	e, err := cgp.NewEngine(cgp.Config{Backend: b, ProviderVersion: "test", Group: "lab", SigningKey: cgptest.TestKey(),
		Now: func() time.Time { return time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC) }})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func query(t testing.TB, e *cgp.Engine, js string) *cgp.ContextQueryResult {
	t.Helper()
	q, err := cgp.DecodeQuery([]byte(js))
	if err != nil {
		t.Fatalf("decode %s: %v", js, err)
	}
	res, err := e.Query(context.Background(), q)
	if err != nil {
		t.Fatalf("query %s: %v", js, err)
	}
	return res
}

func ms(s string) time.Time {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		panic(err)
	}
	return t
}

// smallStore: a root, its remix, and a remix of that (a 3-record thread),
// plus an unrelated record. The root is superseded by its child.
func smallStore() *cgp.MemBackend {
	b := cgp.NewMemBackend()
	put := func(r cgp.Record) {
		if err := b.Put(r); err != nil {
			panic(err)
		}
	}
	put(cgp.Record{Key: "cmb1-root", Group: "lab", CreatedBy: "n1", AuthorName: "alice", CreatedAt: ms("2026-07-01T00:00:00Z"),
		StoredAt: ms("2026-07-01T00:00:05Z"), ValidTo: ms("2026-07-02T00:00:00.5Z"),
		Fields: cgp.Fields{Focus: "retry policy draft", Issue: "neutral", Intent: "decision", Motivation: "neutral", Commitment: "neutral", Perspective: "neutral", Mood: "calm"},
		Raw:    []byte(`{"key":"cmb1-root","createdAt":1782864000000}`)})
	put(cgp.Record{Key: "cmb1-mid", Group: "lab", CreatedBy: "n2", AuthorName: "bob", CreatedAt: ms("2026-07-02T00:00:00.5Z"),
		StoredAt: ms("2026-07-02T00:01:00Z"), Parents: []string{"cmb1-root"},
		Fields: cgp.Fields{Focus: "retry policy revised", Issue: "flaky", Intent: "supersede", Motivation: "neutral", Commitment: "bob ships it", Perspective: "neutral", Mood: "neutral"}})
	put(cgp.Record{Key: "cmb1-leaf", Group: "lab", CreatedBy: "n1", AuthorName: "alice", CreatedAt: ms("2026-08-01T00:00:00Z"),
		StoredAt: ms("2026-08-01T00:00:01Z"), Parents: []string{"cmb1-mid"},
		Fields: cgp.Fields{Focus: "retry policy shipped", Issue: "neutral", Intent: "artifact", Motivation: "neutral", Commitment: "neutral", Perspective: "neutral", Mood: "glad"}})
	put(cgp.Record{Key: "cmb1-other", Group: "lab", CreatedBy: "n3", CreatedAt: ms("2026-09-01T00:00:00Z"),
		Fields: cgp.Fields{Focus: "unrelated lunch menu", Mood: "hungry"}})
	return b
}

func ids(res *cgp.ContextQueryResult) []string {
	var out []string
	for _, f := range res.Frames {
		out = append(out, f.ID)
	}
	return out
}

func TestAsOfHalfOpenInstants(t *testing.T) {
	e := mustEngine(t, smallStore())
	// cmb1-root is valid [07-01T00:00:00Z, 07-02T00:00:00.5Z). At the
	// fractional bound itself it has ended and cmb1-mid has begun.
	for _, c := range []struct {
		asOf string
		want []string
	}{
		{"2026-06-30T23:59:59.999Z", nil},
		{"2026-07-01T00:00:00Z", []string{"memory:cmb1-root"}},
		{"2026-07-02T00:00:00Z", []string{"memory:cmb1-root"}},
		{"2026-07-02T00:00:00.5Z", []string{"memory:cmb1-mid"}},
	} {
		res := query(t, e, `{"goal":"x","query_text":"retry policy","kinds":["memory"],"max_frames":10,"max_tokens":100000,"as_of":"`+c.asOf+`"}`)
		if got := strings.Join(ids(res), ","); got != strings.Join(c.want, ",") {
			t.Errorf("as_of %s: got %q want %q", c.asOf, got, c.want)
		}
	}
}

func TestEpisodeThreadAndPin(t *testing.T) {
	e := mustEngine(t, smallStore())
	res := query(t, e, `{"goal":"x","query_text":"shipped","kinds":["episode"],"max_frames":10,"max_tokens":100000}`)
	if len(res.Frames) != 1 || res.Frames[0].ID != "episode:cmb1-leaf" {
		t.Fatalf("episodes: %v", ids(res))
	}
	f := res.Frames[0]
	c := *f.Content
	ri, mi, li := strings.Index(c, "retry policy draft"), strings.Index(c, "retry policy revised"), strings.Index(c, "retry policy shipped")
	if !(ri >= 0 && ri < mi && mi < li) {
		t.Errorf("thread not in time order ancestors→record:\n%s", c)
	}
	if f.ValidFrom != "2026-08-01T00:00:00.000Z" || len(f.Relations) != 3 || len(f.Provenance) != 4 {
		t.Errorf("episode frame: valid_from %s, %d relations, %d provenance", f.ValidFrom, len(f.Relations), len(f.Provenance))
	}
	// Pinned before the leaf exists: the mid record's episode tells the
	// story as it stood (root and mid only) under a pin-qualified id.
	res = query(t, e, `{"goal":"x","query_text":"revised","kinds":["episode"],"max_frames":10,"max_tokens":100000,"as_of":"2026-07-15T00:00:00Z"}`)
	if len(res.Frames) != 1 || res.Frames[0].ID != "episode:cmb1-mid@2026-07-15T00:00:00Z" {
		t.Fatalf("pinned episodes: %v", ids(res))
	}
	if strings.Contains(*res.Frames[0].Content, "shipped") {
		t.Error("pinned episode includes a record created after the pin")
	}
	v := verify(t, e, res.Frames[0].ID, *res.Frames[0].ContentDigest)
	if v.Status != cgp.StatusValid {
		t.Errorf("pinned episode verifies %s", v.Status)
	}
}

func TestKindsAndEmbedding(t *testing.T) {
	e := mustEngine(t, smallStore())
	for _, k := range []string{"memory", "episode"} {
		res := query(t, e, `{"goal":"x","query_text":"retry","kinds":["`+k+`"],"max_frames":10,"max_tokens":100000}`)
		if len(res.Frames) == 0 {
			t.Errorf("kind %s: no frames", k)
		}
		for _, f := range res.Frames {
			if f.Kind != k {
				t.Errorf("kind %s returned %s", k, f.ID)
			}
		}
	}
	if res := query(t, e, `{"goal":"x","query_text":"retry","kinds":["doc","future"],"max_frames":10,"max_tokens":100000}`); len(res.Frames) != 0 {
		t.Errorf("unserved kinds returned %v", ids(res))
	}
	q, _ := cgp.DecodeQuery([]byte(`{"goal":"x","embedding":[0.1,0.2],"max_frames":1,"max_tokens":10}`))
	_, err := e.Query(context.Background(), q)
	if cgp.ErrorCode(err) != cgp.CodeBadRequest {
		t.Errorf("embedding: %v", err)
	}
}

func TestBudgetsExactAndTruthful(t *testing.T) {
	e, _, err := cgptest.NewEngine(240, 1)
	if err != nil {
		t.Fatal(err)
	}
	full := query(t, e, `{"goal":"x","query_text":"retry policy backoff","max_frames":1000,"max_tokens":10000000}`)
	for _, b := range [][2]uint32{{1, 10}, {1, 1000}, {3, 60}, {5, 400}, {0, 4096}, {8, 0}, {1000, 10000000}} {
		res := query(t, e, `{"goal":"x","query_text":"retry policy backoff","max_frames":`+itoa(b[0])+`,"max_tokens":`+itoa(b[1])+`}`)
		var sum uint64
		for _, f := range res.Frames {
			if f.TokenCost != cgp.TokenCost(*f.Content) || *f.ContentDigest != cgp.DigestBytes([]byte(*f.Content)) {
				t.Fatalf("%v: %s cost/digest not derived from content", b, f.ID)
			}
			sum += uint64(f.TokenCost)
		}
		if sum > uint64(b[1]) || len(res.Frames) > int(b[0]) {
			t.Errorf("%v: %d frames costing %d", b, len(res.Frames), sum)
		}
		dropped := 0
		if res.DroppedEstimate != nil {
			dropped = int(*res.DroppedEstimate)
		}
		if res.Truncated != (dropped > 0) {
			t.Errorf("%v: truncated %v with dropped_estimate %d", b, res.Truncated, dropped)
		}
		if len(res.Frames)+dropped != len(full.Frames)+droppedOf(full) {
			t.Errorf("%v: %d returned + %d dropped != %d candidates", b, len(res.Frames), dropped, len(full.Frames)+droppedOf(full))
		}
	}
	if full.Truncated {
		t.Errorf("unbounded query claims truncation (dropped %d)", droppedOf(full))
	}
}

func droppedOf(r *cgp.ContextQueryResult) int {
	if r.DroppedEstimate == nil {
		return 0
	}
	return int(*r.DroppedEstimate)
}

func itoa(u uint32) string { b, _ := json.Marshal(u); return string(b) }

func TestAnchorsBoostLineageNeighbours(t *testing.T) {
	e := mustEngine(t, smallStore())
	// "lunch" matches only cmb1-other; anchoring cmb1-root must still bring
	// the root (0 hops) and cmb1-mid (1 hop) first, and cmb1-leaf (2 hops)
	// above the unanchored text match.
	res := query(t, e, `{"goal":"x","query_text":"lunch","kinds":["memory"],"anchors":["mmp://lab/cmb/cmb1-root"],"max_frames":10,"max_tokens":100000}`)
	got := ids(res)
	if len(got) != 4 || got[3] != "memory:cmb1-other" || got[2] != "memory:cmb1-leaf" {
		t.Fatalf("anchored order: %v", got)
	}
	first := res.Frames[0]
	anchored := first.URI == "mmp://lab/cmb/cmb1-root"
	for _, r := range first.Relations {
		anchored = anchored || r.TargetURI == "mmp://lab/cmb/cmb1-root"
	}
	if !anchored {
		t.Errorf("first frame %s is not anchored (G3)", first.ID)
	}
	for i := 1; i < len(res.Frames); i++ {
		if res.Frames[i].Score > res.Frames[i-1].Score {
			t.Errorf("scores not descending at %d", i)
		}
	}
}

func verify(t testing.TB, e *cgp.Engine, id, digest string) cgp.Verdict {
	t.Helper()
	req, err := cgp.DecodeVerifyRequest([]byte(`{"frames":[{"provider_id":"provider-under-test","frame_id":` + jsonStr(id) + `,"content_digest":` + jsonStr(digest) + `}]}`))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := e.Verify(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	return resp.Verdicts[0]
}

func jsonStr(s string) string { b, _ := json.Marshal(s); return string(b) }

func TestVerifyValidStaleGone(t *testing.T) {
	b := smallStore()
	e := mustEngine(t, b)
	res := query(t, e, `{"goal":"x","query_text":"shipped","kinds":["memory"],"max_frames":1,"max_tokens":100000}`)
	f := res.Frames[0]
	if v := verify(t, e, f.ID, *f.ContentDigest); v.Status != cgp.StatusValid {
		t.Fatalf("fresh frame: %s", v.Status)
	}
	// The roster learns a new display name: the rendering changes, so the
	// served digest changes and the old one is stale.
	r, _, _ := b.Get(context.Background(), "cmb1-leaf")
	r.AuthorName = "Alice Liddell"
	if err := b.Put(r); err != nil {
		t.Fatal(err)
	}
	v := verify(t, e, f.ID, *f.ContentDigest)
	if v.Status != cgp.StatusStale || v.ReplacementDigest == nil || *v.ReplacementDigest == *f.ContentDigest {
		t.Fatalf("changed frame: %+v", v)
	}
	if v := verify(t, e, f.ID, *v.ReplacementDigest); v.Status != cgp.StatusValid {
		t.Errorf("replacement digest is not valid: %s", v.Status)
	}
	// A new descendant changes the thread an episode narrates.
	ep := query(t, e, `{"goal":"x","query_text":"revised","kinds":["episode"],"max_frames":1,"max_tokens":100000}`).Frames[0]
	b.Delete("cmb1-leaf")
	if v := verify(t, e, ep.ID, *ep.ContentDigest); v.Status != cgp.StatusStale {
		t.Errorf("episode after a member vanished: %s", v.Status)
	}
	if v := verify(t, e, f.ID, *f.ContentDigest); v.Status != cgp.StatusGone {
		t.Errorf("deleted record: %s", v.Status)
	}
	if v := verify(t, e, "not-ours", *f.ContentDigest); v.Status != cgp.StatusGone {
		t.Errorf("foreign id: %s", v.Status)
	}
	// Identities are echoed verbatim, malformed values included.
	req, _ := cgp.DecodeVerifyRequest([]byte(`{"frames":[{"provider_id":"p","frame_id":42,"content_digest":"SHA256:X","extra":1}]}`))
	resp, _ := e.Verify(context.Background(), req)
	out, _ := json.Marshal(resp)
	if string(out) != `{"verdicts":[{"frame":{"provider_id":"p","frame_id":42,"content_digest":"SHA256:X"},"status":"unknown"}]}` {
		t.Errorf("echo: %s", out)
	}
}

func TestFrameRendering(t *testing.T) {
	e := mustEngine(t, smallStore())
	f := query(t, e, `{"goal":"x","query_text":"revised","kinds":["memory"],"max_frames":1,"max_tokens":100000}`).Frames[0]
	if f.URI != "mmp://lab/cmb/cmb1-mid" || f.ValidFrom != "2026-07-02T00:00:00.500Z" || f.RecordedAt != "2026-07-02T00:01:00.000Z" {
		t.Errorf("uri/time: %s %s %s", f.URI, f.ValidFrom, f.RecordedAt)
	}
	for _, want := range []string{"bob", "2026-07-02T00:00:00.500Z", "cmb1-mid"} {
		if !strings.Contains(f.CitationLabel, want) {
			t.Errorf("citation_label %q lacks %q", f.CitationLabel, want)
		}
	}
	for _, field := range []string{"focus: retry policy revised", "issue: flaky", "intent: supersede", "motivation: neutral", "commitment: bob ships it", "perspective: neutral", "mood: neutral"} {
		if !strings.Contains(*f.Content, field+"\n") {
			t.Errorf("content lacks %q:\n%s", field, *f.Content)
		}
	}
	if len(f.Relations) != 2 || f.Relations[0].Rel != cgp.RelParent || f.Relations[1].Rel != cgp.RelChild ||
		!strings.Contains(f.Relations[0].DisplayName, "alice") {
		t.Errorf("relations: %+v", f.Relations)
	}
	// cmb1-mid has no Raw: its provenance link carries no digest rather
	// than a wrong one; cmb1-root's digest is SHA-256 of its JCS form.
	if f.Provenance[0].Digest != nil {
		t.Errorf("digest without a raw record: %v", *f.Provenance[0].Digest)
	}
	root := query(t, e, `{"goal":"x","query_text":"draft","kinds":["memory"],"max_frames":1,"max_tokens":100000}`).Frames[0]
	want := cgp.DigestBytes([]byte(`{"createdAt":1782864000000,"key":"cmb1-root"}`))
	if root.Provenance[0].Digest == nil || *root.Provenance[0].Digest != want {
		t.Errorf("provenance digest %v, want %s", root.Provenance[0].Digest, want)
	}
	if root.ValidTo != "2026-07-02T00:00:00.500Z" {
		t.Errorf("valid_to %q", root.ValidTo)
	}
}

func TestInvalidUTF8Sanitised(t *testing.T) {
	b := cgp.NewMemBackend()
	_ = b.Put(cgp.Record{Key: "cmb1-bad", CreatedAt: ms("2026-07-01T00:00:00Z"), Fields: cgp.Fields{Focus: "probe \xff\xfe here"}})
	e := mustEngine(t, b)
	f := query(t, e, `{"goal":"probe","max_frames":1,"max_tokens":1000}`).Frames[0]
	enc, _ := json.Marshal(f)
	var back cgp.Frame
	_ = json.Unmarshal(enc, &back)
	if *back.ContentDigest != cgp.DigestBytes([]byte(*back.Content)) || back.TokenCost != cgp.TokenCost(*back.Content) {
		t.Error("digest/cost do not survive the wire for sanitised content")
	}
	if f.URI != "mmp://lab/cmb/cmb1-bad" {
		t.Errorf("legacy group fallback: %s", f.URI)
	}
}

func TestBackendFailureIsUnavailable(t *testing.T) {
	e := mustEngine(t, failing{})
	q, _ := cgp.DecodeQuery([]byte(`{"goal":"x","max_frames":1,"max_tokens":10}`))
	_, err := e.Query(context.Background(), q)
	if cgp.ErrorCode(err) != cgp.CodeUnavailable {
		t.Errorf("backend failure: %v", err)
	}
}

type failing struct{}

func (failing) Search(context.Context, string, cgp.SearchOptions) (cgp.SearchResult, error) {
	return cgp.SearchResult{}, errors.New("disk on fire")
}
func (failing) Get(context.Context, string) (cgp.Record, bool, error) {
	return cgp.Record{}, false, errors.New("disk on fire")
}
func (failing) Children(context.Context, string) ([]string, error) {
	return nil, errors.New("disk on fire")
}
