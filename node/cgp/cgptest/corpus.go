// Package cgptest is the project's own CGP conformance harness (spec/cgp.md
// §9.2): a host-side runner that spawns a provider the way the reference
// host does and runs every §9.1 check plus the project's stricter ones, a
// red-team fake provider whose misbehaviour modes prove each check bites,
// and a deterministic seeded corpus. It is for tests only.
package cgptest

import (
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/cmbnode/cmbnode/node/cgp"
)

// Group is the mesh group of the seeded corpus.
const Group = "lab"

// TestKey is a fixed Ed25519 key for signing in tests (never a real key).
func TestKey() ed25519.PrivateKey {
	seed := sha256.Sum256([]byte("cmbnode cgptest signing key"))
	return ed25519.NewKeyFromSeed(seed[:])
}

type author struct{ id, name string }

var corpusAuthors = [...]author{
	{"0190f5a2-7b3c-7d4e-8f00-000000000001", "alice"},
	{"0190f5a2-7b3c-7d4e-8f00-000000000002", "bob"},
	{"0190f5a2-7b3c-7d4e-8f00-000000000003", "柴田"},
	{"0190f5a2-7b3c-7d4e-8f00-000000000004", "dana"},
	{"0190f5a2-7b3c-7d4e-8f00-000000000005", ""}, // name unknown: nodeId shown
}

var corpusTopics = [...]string{
	"conformance probe for the context provider",
	"retry policy with exponential backoff",
	"database migration to the new schema",
	"deploy pipeline flakiness on arm64",
	"mesh gossip latency between peers",
	"budget accounting of token costs",
	"lineage threads and remix chains",
	"incident review of the storage outage",
}

var corpusMoods = [...]string{"calm", "curious", "worried", "confident", "neutral", "frustrated"}

// Corpus returns n deterministic records (n >= 10) spread over
// 2026-05-01..2026-12-01 in group "lab": about a third are remixes of
// recent records (some with two parents), some superseded ones carry
// ValidTo, and a few exercise edge cases (invalid UTF-8, CJK and emoji,
// one very large record, all-neutral fields).
func Corpus(n int, seed uint64) []cgp.Record {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	start := time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC)
	span := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC).Sub(start)
	recs := make([]cgp.Record, 0, n)
	topicOf := make([]int, 0, n)
	for i := 0; i < n; i++ {
		a := corpusAuthors[rng.IntN(len(corpusAuthors))]
		created := start.Add(time.Duration(int64(span) / int64(n) * int64(i))).Add(time.Duration(rng.IntN(3600_000)) * time.Millisecond).Truncate(time.Millisecond)
		topic := rng.IntN(len(corpusTopics))
		r := cgp.Record{
			Group:      Group,
			CreatedBy:  a.id,
			AuthorName: a.name,
			CreatedAt:  created,
			StoredAt:   created.Add(time.Duration(1+rng.IntN(600)) * time.Second),
		}
		intent := "decision"
		remix := i > 3 && rng.IntN(3) == 0
		if remix || i == 12 {
			// Remix a recent record, preferably on the same topic. Record 12
			// always supersedes record 5, so a matching record with valid_to
			// exists before every as-of pin.
			pi := i - 1 - rng.IntN(min(i, 12))
			if i == 12 {
				pi = 5
			}
			topic = topicOf[pi]
			r.Parents = []string{recs[pi].Key}
			if rng.IntN(6) == 0 {
				if pj := i - 1 - rng.IntN(min(i, 12)); pj != pi {
					r.Parents = append(r.Parents, recs[pj].Key)
				}
			}
			if (i == 12 || rng.IntN(3) == 0) && recs[pi].ValidTo.IsZero() {
				intent = "supersede"
				recs[pi].ValidTo = created
			} else {
				intent = "artifact"
			}
		}
		r.Fields = cgp.Fields{
			Focus:       fmt.Sprintf("%s (note %d)", corpusTopics[topic], i),
			Issue:       pick(rng, "flaky under load", "unclear ownership", "neutral", "cost is rising"),
			Intent:      intent,
			Motivation:  pick(rng, "keep the mesh healthy", "neutral", "reduce toil"),
			Commitment:  pick(rng, "neutral", "bob will follow up by Friday", "alice drafts a fix"),
			Perspective: pick(rng, "operator", "neutral", "reviewer"),
			Mood:        corpusMoods[rng.IntN(len(corpusMoods))],
		}
		if rng.IntN(3) == 0 {
			v, ar := float64(rng.IntN(21)-10)/10, float64(rng.IntN(21)-10)/10
			r.Fields.Valence, r.Fields.Arousal = &v, &ar
		}
		switch i {
		case 3:
			r.Fields.Focus = "conformance probe with invalid \xff\xfe UTF-8 from a peer"
		case 5:
			r.Fields.Focus = "文脈図 conformance probe 😀 with multi-byte text"
		case 7:
			r.Fields.Focus = "conformance probe: a very large note"
			r.Fields.Motivation = strings.Repeat("a long peer-supplied explanation. ", 1500)
		case 9:
			r.Fields = cgp.Fields{Focus: "neutral", Issue: "neutral", Intent: "neutral", Motivation: "neutral",
				Commitment: "neutral", Perspective: "neutral", Mood: "neutral"}
		}
		r.Key = fakeKey(seed, i)
		recs = append(recs, r)
		topicOf = append(topicOf, topic)
	}
	for i := range recs {
		recs[i].Raw = rawRecord(recs[i])
	}
	return recs
}

func pick(rng *rand.Rand, opts ...string) string { return opts[rng.IntN(len(opts))] }

// fakeKey is shaped like a cmb1- address but is not one: the CGP layer
// never recomputes MMP addresses, it only carries them.
func fakeKey(seed uint64, i int) string {
	h := sha256.Sum256([]byte(fmt.Sprintf("cgptest %d %d", seed, i)))
	return "cmb1-" + hex.EncodeToString(h[:])
}

// rawRecord renders the MMP v1.1 wire shape (spec/mmp.md §6.1) so the
// provenance digest is taken over realistic JSON.
func rawRecord(r cgp.Record) []byte {
	field := func(s string) map[string]any { return map[string]any{"text": strings.ToValidUTF8(s, "\uFFFD")} }
	mood := field(r.Fields.Mood)
	if r.Fields.Valence != nil {
		mood["valence"] = *r.Fields.Valence
	}
	if r.Fields.Arousal != nil {
		mood["arousal"] = *r.Fields.Arousal
	}
	m := map[string]any{
		"key":       r.Key,
		"createdBy": r.CreatedBy,
		"createdAt": r.CreatedAt.UnixMilli(),
		"group":     r.Group,
		"fields": map[string]any{
			"focus": field(r.Fields.Focus), "issue": field(r.Fields.Issue), "intent": field(r.Fields.Intent),
			"motivation": field(r.Fields.Motivation), "commitment": field(r.Fields.Commitment),
			"perspective": field(r.Fields.Perspective), "mood": mood,
		},
		"lineage": nil,
		"sigAlg":  "ed25519",
		"sig":     "c2lnbmF0dXJlLW5vdC1jaGVja2VkLWhlcmU",
	}
	if len(r.Parents) > 0 {
		m["lineage"] = map[string]any{"parents": r.Parents, "ancestors": r.Parents, "method": "remix"}
	}
	b, err := json.Marshal(m)
	if err != nil {
		panic(err) // only plain maps, strings and numbers: cannot fail
	}
	return b
}

// SeededBackend returns a MemBackend holding Corpus(n, seed).
func SeededBackend(n int, seed uint64) *cgp.MemBackend {
	b := cgp.NewMemBackend()
	for _, r := range Corpus(n, seed) {
		if err := b.Put(r); err != nil {
			panic(err) // every corpus record has a key
		}
	}
	return b
}

// NewEngine returns the honest engine over a seeded backend, signing with
// TestKey and a pinned clock so output is reproducible.
func NewEngine(n int, seed uint64) (*cgp.Engine, *cgp.MemBackend, error) {
	b := SeededBackend(n, seed)
	e, err := cgp.NewEngine(cgp.Config{
		Backend:         b,
		ProviderName:    "cmbnode",
		ProviderVersion: "test",
		Group:           Group,
		SigningKey:      TestKey(),
		AttesterID:      "cgptest-node",
		Now:             func() time.Time { return time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC) },
	})
	return e, b, err
}
