package node

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cmbnode/cmbnode/cmb"
	"github.com/cmbnode/cmbnode/node/embed"
	"github.com/cmbnode/cmbnode/node/embed/embedtest"
	"github.com/cmbnode/cmbnode/node/events"
	"github.com/cmbnode/cmbnode/node/identity"
	"github.com/cmbnode/cmbnode/node/svaf"
)

// receive hands alice's published records to bob through Check and Accept.
func receive(t *testing.T, bob, alice *Node, recs []*cmb.Record) {
	t.Helper()
	for _, r := range recs {
		c, err := bob.Check(context.Background(), r, source(alice))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := bob.Accept(context.Background(), c); err != nil {
			t.Fatal(err)
		}
	}
}

func acceptedEvent(t *testing.T, ch <-chan events.Event) AcceptedEvent {
	t.Helper()
	select {
	case e := <-ch:
		return e.Data.(AcceptedEvent)
	case <-time.After(5 * time.Second):
		t.Fatal("no cmb-accepted event")
	}
	return AcceptedEvent{}
}

// TestAdmissionDecisions: the first broadcast bootstraps as aligned, a
// near-copy of a memory is redundant (of that memory), kept and hidden from
// recall; an on-topic record is admitted and surfaced; a directed record is
// never judged. Verdicts survive a reopen.
func TestAdmissionDecisions(t *testing.T) {
	ctx := context.Background()
	alice, am := openNode(t, "alice", "alpha")
	bob, _ := openNode(t, "bob", "alpha")
	introduce(t, alice, bob)
	sub := bob.Events().Subscribe(16)
	defer sub.Close()

	first := "The parser release ships on Friday after the code freeze"
	if _, err := alice.Remember(ctx, RememberInput{Fields: fields(first)}); err != nil {
		t.Fatal(err)
	}
	receive(t, bob, alice, am.published[len(am.published)-1:])
	ev := acceptedEvent(t, sub.C)
	if ev.Decision != "aligned" || ev.Drift == nil || *ev.Drift != 0 {
		t.Fatalf("first record into an empty memory: %s drift %v, want aligned 0", ev.Decision, ev.Drift)
	}
	anchor := ev.Key

	if _, err := alice.Remember(ctx, RememberInput{Fields: fields(first + ".")}); err != nil {
		t.Fatal(err)
	}
	receive(t, bob, alice, am.published[len(am.published)-1:])
	ev = acceptedEvent(t, sub.C)
	if ev.Decision != "redundant" || ev.Nearest != anchor || !ev.Hidden {
		t.Fatalf("near-copy: %+v, want redundant of %s, hidden", ev, anchor)
	}
	dupKey := ev.Key

	if _, err := alice.Remember(ctx, RememberInput{Fields: fields("The parser release slips to Monday after the freeze")}); err != nil {
		t.Fatal(err)
	}
	receive(t, bob, alice, am.published[len(am.published)-1:])
	ev = acceptedEvent(t, sub.C)
	if d, _ := svaf.ParseDecision(ev.Decision); !d.Admitted() || ev.Hidden {
		t.Fatalf("on-topic record: %+v, want admitted and surfaced", ev)
	}
	novel := ev.Key

	hits, err := bob.Recall(ctx, "parser release freeze", 10)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, h := range hits {
		got[h.Key] = true
	}
	if !got[anchor] || !got[novel] || got[dupKey] {
		t.Fatalf("recall %v: want the anchor and the admitted record, not the redundant copy", got)
	}
	// Kept, not deleted: Get still returns it.
	if _, err := bob.Get(ctx, dupKey); err != nil {
		t.Fatalf("redundant record is not kept: %v", err)
	}

	if _, err := alice.Remember(ctx, RememberInput{Fields: fields(first + "!"), To: bob.Identity().NodeID}); err != nil {
		t.Fatal(err)
	}
	receive(t, bob, alice, am.published[len(am.published)-1:])
	ev = acceptedEvent(t, sub.C)
	if ev.Decision != DecisionDirected || ev.Drift != nil || ev.Hidden {
		t.Fatalf("directed near-copy: %+v, want directed, surfaced", ev)
	}
	if v, ok := bob.VerdictOf(dupKey); !ok || v.Decision != "redundant" || v.Nearest != anchor {
		t.Fatalf("kept verdict %+v %t", v, ok)
	}
	if c := bob.SVAFCounts(); c["redundant"] != 1 || c["aligned"]+c["guarded"] != 2 {
		t.Fatalf("counts %v", c)
	}
}

// TestVerdictsSurviveReopen: a verdict is stored in its record's commit and
// read back at Open, so the policy hides the same records after a restart.
func TestVerdictsSurviveReopen(t *testing.T) {
	ctx := context.Background()
	alice, am := openNode(t, "alice", "alpha")
	home := t.TempDir()
	bob := reopenable(t, home, "bob")
	introduce(t, alice, bob)
	for _, f := range []string{"Grace adopted a grey kitten named Pixel", "Grace adopted a grey kitten named Pixel!"} {
		if _, err := alice.Remember(ctx, RememberInput{Fields: fields(f)}); err != nil {
			t.Fatal(err)
		}
	}
	receive(t, bob, alice, am.published)
	dup := am.published[1].Key
	if !bob.Hidden(dup) {
		t.Fatal("near-copy not hidden")
	}
	bob.Close()
	bob = reopenable(t, home, "bob")
	if !bob.Hidden(dup) {
		t.Fatal("near-copy no longer hidden after a reopen")
	}
	if bob.Hidden(am.published[0].Key) {
		t.Fatal("anchor hidden after a reopen")
	}
}

// TestSurfacePolicyConfigurable: surfacing every verdict shows the copy.
func TestSurfacePolicyConfigurable(t *testing.T) {
	ctx := context.Background()
	alice, am := openNode(t, "alice", "alpha")
	bob := openWith(t, "bob", Options{SVAF: SVAFOptions{Surface: []svaf.Decision{svaf.Aligned, svaf.Guarded, svaf.Redundant, svaf.Rejected}}})
	introduce(t, alice, bob)
	for _, f := range []string{"the kiln fires at dawn", "the kiln fires at dawn."} {
		if _, err := alice.Remember(ctx, RememberInput{Fields: fields(f)}); err != nil {
			t.Fatal(err)
		}
	}
	receive(t, bob, alice, am.published)
	if v, _ := bob.VerdictOf(am.published[1].Key); v.Decision != "redundant" || v.Hidden {
		t.Fatalf("verdict %+v: want redundant, shown", v)
	}
	if _, err := newAdmission(SVAFOptions{Surface: []svaf.Decision{"admitted"}}); err == nil {
		t.Fatal("an unknown decision in the surface policy was accepted")
	}
}

func openWith(t *testing.T, name string, o Options) *Node {
	t.Helper()
	n := reopenableWith(t, t.TempDir(), name, o)
	t.Cleanup(func() { n.Close() })
	return n
}

func reopenable(t *testing.T, home, name string) *Node {
	t.Helper()
	n := reopenableWith(t, home, name, Options{})
	t.Cleanup(func() { n.Close() })
	return n
}

// TestRecallFindsAuthorName: recall "grace" finds the memories authored by
// the peer named grace, though no record holds the word; a rename takes
// effect on the next recall.
func TestRecallFindsAuthorName(t *testing.T) {
	ctx := context.Background()
	grace, gm := openNode(t, "grace", "alpha")
	bob, _ := openNode(t, "bob", "alpha")
	other, om := openNode(t, "heidi", "alpha")
	introduce(t, grace, bob)
	introduce(t, other, bob)
	if _, err := grace.Remember(ctx, RememberInput{Fields: fields("the kiln fires at dawn")}); err != nil {
		t.Fatal(err)
	}
	if _, err := other.Remember(ctx, RememberInput{Fields: fields("glaze recipes for stoneware")}); err != nil {
		t.Fatal(err)
	}
	receive(t, bob, grace, gm.published)
	receive(t, bob, other, om.published)
	hits, err := bob.Recall(ctx, "grace", 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(hits) != 1 || hits[0].CreatedBy != grace.Identity().NodeID {
		t.Fatalf("recall grace: %+v, want grace's one memory", hits)
	}
	// Name and text evidence add up: grace's record on the topic ranks first.
	hits, _ = bob.Recall(ctx, "grace glaze kiln", 10)
	if len(hits) != 2 || hits[0].CreatedBy != grace.Identity().NodeID {
		t.Fatalf("recall grace glaze kiln: %+v", hits)
	}
	id := grace.Identity()
	if err := bob.PinPeer(ctx, id.NodeID, id.PublicKey(), id.X25519.PublicKey().Bytes(), "Ada"); err != nil {
		t.Fatal(err)
	}
	if hits, _ := bob.Recall(ctx, "grace", 10); len(hits) != 0 {
		t.Fatalf("after a rename, recall grace: %+v", hits)
	}
	if hits, _ := bob.Recall(ctx, "ada", 10); len(hits) != 1 {
		t.Fatalf("after a rename, recall ada: %+v", hits)
	}
	if err := bob.Store().Check(ctx); err != nil {
		t.Fatal(err)
	}
}

// fakeEncoder is an OpenAI-compatible endpoint on loopback whose vectors
// put texts of one topic together: dimension i is 1 when the text holds a
// word of topics[i] (synonyms), the last a small constant.
func fakeEncoder(t *testing.T, topics [][]string, down *atomic.Bool) *httptest.Server {
	return fakeEncoderWith(t, topics, fakeKnobs{down: down})
}

// fakeKnobs steer a fakeEncoder: while down it answers 503; while hang
// it answers nothing until hang clears or the client gives up; calls
// counts the requests it answered with vectors.
type fakeKnobs struct {
	down, hang *atomic.Bool
	calls      *atomic.Int64
}

func fakeEncoderWith(t *testing.T, topics [][]string, k fakeKnobs) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if k.down != nil && k.down.Load() {
			http.Error(w, "down", http.StatusServiceUnavailable)
			return
		}
		// The body read in full, the server notices the client giving up.
		inputs, _ := embedtest.Inputs(r)
		io.Copy(io.Discard, r.Body)
		for k.hang != nil && k.hang.Load() {
			select {
			case <-r.Context().Done():
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
		if k.calls != nil {
			k.calls.Add(1)
		}
		embedtest.Reply(w, inputs, func(in string) []float32 {
			v := make([]float32, len(topics)+1)
			v[len(topics)] = 0.1
			for j, words := range topics {
				for _, tw := range words {
					if strings.Contains(strings.ToLower(in), tw) {
						v[j] = 1
					}
				}
			}
			return v
		})
	}))
	t.Cleanup(srv.Close)
	if k.hang != nil {
		t.Cleanup(func() { k.hang.Store(false) }) // before Close waits for handlers
	}
	return srv
}

// TestDenseRecall: with an HTTP encoder, a paraphrase sharing no word with
// a record finds it through its vectors (lexical recall does not), records
// stored while the encoder was down are encoded once it is back, and a
// query embedding of the wrong length is refused.
func TestDenseRecall(t *testing.T) {
	ctx := context.Background()
	var down atomic.Bool
	down.Store(true)
	srv := fakeEncoder(t, [][]string{{"cat", "kitten", "feline"}, {"train", "rail"}, {"stove"}}, &down)
	enc, err := embed.NewHTTP(embed.HTTPOptions{URL: srv.URL + "/v1", Model: "fake", Dim: 4, Retries: -1, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	n := openWith(t, "alice", Options{Encoder: enc, Dense: DenseOptions{MaxBackoff: 20 * time.Millisecond}})
	start := time.Now()
	res, err := n.Remember(ctx, RememberInput{Fields: fields("Pixel the kitten sleeps all day")})
	if err != nil {
		t.Fatal(err)
	}
	if el := time.Since(start); el > time.Second {
		t.Fatalf("remember waited %v on a down encoder", el)
	}
	if _, err := n.Remember(ctx, RememberInput{Fields: fields("the train leaves at nine")}); err != nil {
		t.Fatal(err)
	}
	if hits, _ := n.Recall(ctx, "feline", 10); len(hits) != 0 {
		t.Fatalf("before the encoder answers, recall feline: %+v", hits)
	}
	// The worker fails while the encoder is down and keeps the records.
	deadline := time.Now().Add(10 * time.Second)
	for {
		st, _ := n.Dense()
		if st.Failures > 0 {
			if st.Indexed != 0 {
				t.Fatalf("after a failed round: %+v, want nothing indexed", st)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no failed round while the encoder was down: %+v", st)
		}
		time.Sleep(5 * time.Millisecond)
	}
	down.Store(false)
	for {
		st, _ := n.Dense()
		if st.Pending == 0 && st.Indexed == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("vectors not computed: %+v", st)
		}
		time.Sleep(10 * time.Millisecond)
	}
	hits, err := n.Recall(ctx, "feline", 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(hits) != 1 || hits[0].Key != res.Key {
		t.Fatalf("recall feline: %+v, want the kitten", hits)
	}
	if k, ok := n.EmbeddingsKernel(); !ok || k.Fingerprint != "fake/4/l2" {
		t.Fatalf("kernel %+v", k)
	}
	if d := n.Status().Dense; d == nil || d.Fingerprint != "fake/4/l2" || d.Dim != 4 || d.Indexed != 2 || d.Failures == 0 {
		t.Fatalf("status reports the encoder as %+v", d)
	}
	th, err := n.SearchVector(ctx, "", []float64{1, 0, 0, 0}, 5, time.Time{})
	if err != nil || len(th) != 1 || th[0].Key != res.Key {
		t.Fatalf("search by vector: %+v %v", th, err)
	}
	if _, err := n.SearchVector(ctx, "", []float64{1}, 5, time.Time{}); err == nil {
		t.Fatal("a 1-element query embedding was accepted")
	}
}

func reopenableWith(t *testing.T, home, name string, o Options) *Node {
	t.Helper()
	id, _, err := identity.LoadOrCreate(home, name)
	if err != nil {
		t.Fatal(err)
	}
	o.Home, o.Identity = home, id
	if o.Group == "" {
		o.Group = "alpha"
	}
	n, err := Open(o)
	if err != nil {
		t.Fatal(err)
	}
	n.AttachMesh(&fakeMesh{})
	return n
}
