package node

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	mrand "math/rand"
	"math/rand/v2"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cmbnode/cmbnode/cmb"
	"github.com/cmbnode/cmbnode/internal/benchtext"
	"github.com/cmbnode/cmbnode/node/identity"
	"github.com/cmbnode/cmbnode/node/svaf"
)

// svafVerdictsDigest is the SHA-256 of TestSVAFVerdictsUnchanged's
// verdicts, with the nearest anchors a record's near-copies by MinHash of
// its word pairs (nearcopy.go): caches and sparse vectors must leave every
// verdict, drift and nearest anchor as it is. A deliberate
// change of SVAF's outcome changes it; CMBNODE_SVAF_DIGEST=1 prints the
// new one.
const svafVerdictsDigest = "f422af4e5dd29da35339e1adc1f01bd6dd573dc6974c4b6be4c4d3efd8b39280"

// TestSVAFVerdictsUnchanged judges 3,000 records, one after another with a
// fixed clock and fixed keys, through Check and Accept: new texts, copies
// of earlier records with a word added, records of another vocabulary,
// empty and "neutral" fields, non-ASCII text and ages up to 80 minutes,
// reaching all four verdicts. Each record's verdict, drift (12 decimals)
// and nearest anchor (as its record's index) go into one digest.
func TestSVAFVerdictsUnchanged(t *testing.T) {
	if testing.Short() {
		t.Skip("3,000 records")
	}
	ctx := context.Background()
	base := time.UnixMilli(1_751_000_000_000)
	var tick atomic.Int64
	now := func() time.Time { return base.Add(time.Duration(tick.Load()) * 37 * time.Second) }
	aliceID, bob, src := seededReceiver(t, now)
	r := mrand.New(mrand.NewSource(7))
	vocab := benchtext.Vocab(r, 600)
	z := mrand.NewZipf(r, 1.1, 1, uint64(len(vocab)-1))
	other := benchtext.Vocab(mrand.New(mrand.NewSource(99)), 600)
	for k := range other {
		other[k] = "q" + other[k] + "x"
	}
	var prev [][cmb.NumFields]string
	index := map[string]int{}
	h := sha256.New()
	counts := map[svaf.Decision]int{}
	for i := range 3000 {
		var texts [cmb.NumFields]string
		switch {
		case i > 10 && i%7 == 0:
			texts = prev[r.Intn(len(prev))]
			texts[r.Intn(cmb.NumFields)] += " extra"
		case i > 0 && i%13 == 0:
			texts = prev[len(prev)-1]
			texts[0] = "Ünïcödé straße 東京 " + texts[0]
			texts[3] = "neutral"
		case i%11 == 0 || i%29 == 3:
			for j := range texts {
				texts[j] = benchtext.Field(cmb.FieldNames[j]+":", 300, other, z)
				if j%2 == 1 {
					texts[j] = benchtext.Field("", 300, vocab, z)
				}
			}
		default:
			for j := range texts {
				texts[j] = benchtext.Field(cmb.FieldNames[j]+":", 300, vocab, z)
			}
		}
		if i%17 == 0 {
			texts[5] = ""
		}
		prev = append(prev, texts)
		var f cmb.Fields
		for j := range f {
			f[j].Text = strings.TrimRight(texts[j], " ") + strings.Repeat(" ", i%3) // some end in spaces
		}
		tick.Add(1)
		at := now().Add(-time.Duration(i%9) * 10 * time.Minute).UnixMilli()
		rec, err := cmb.Build(cmb.Draft{Fields: f, Group: "alpha", CreatedBy: aliceID.NodeID, CreatedAt: at}, aliceID.Ed25519)
		if err != nil {
			t.Fatal(err)
		}
		index[rec.Key] = i
		c, err := bob.Check(ctx, rec, src)
		if err != nil {
			fmt.Fprintf(h, "%d check %v\n", i, err)
			continue
		}
		if _, err := bob.Accept(ctx, c); err != nil {
			t.Fatal(err)
		}
		v, ok := bob.VerdictOf(rec.Key)
		nearest := -1
		if n, found := index[v.Nearest]; found {
			nearest = n
		}
		fmt.Fprintf(h, "%d %t %s %.12f %d\n", i, ok, v.Decision, v.Drift, nearest)
		counts[svaf.Decision(v.Decision)]++
	}
	for _, d := range svaf.Decisions() {
		if counts[d] == 0 {
			t.Errorf("no record was %s: %v", d, counts)
		}
	}
	got := hex.EncodeToString(h.Sum(nil))
	if os.Getenv("CMBNODE_SVAF_DIGEST") != "" {
		t.Logf("digest %s (%v)", got, counts)
	}
	if got != svafVerdictsDigest {
		t.Fatalf("verdicts digest %s, want %s (%v)", got, svafVerdictsDigest, counts)
	}
}

// seededIdentities are alice's identity and bob's, in bob's home, made
// from fixed seeds so that the records built from them, and so the
// verdicts, are the same on every run.
func seededIdentities(t testing.TB) (alice *identity.Identity, bobHome string, bob *identity.Identity) {
	t.Helper()
	seeded := func(seed uint64) *rand.ChaCha8 {
		var s [32]byte
		s[0] = byte(seed)
		return rand.NewChaCha8(s)
	}
	alice, err := identity.Create(t.TempDir(), "alice", seeded(1))
	if err != nil {
		t.Fatal(err)
	}
	bobHome = t.TempDir()
	bob, err = identity.Create(bobHome, "bob", seeded(2))
	if err != nil {
		t.Fatal(err)
	}
	return alice, bobHome, bob
}

// seededReceiver is bob's node, open in group alpha on seededIdentities'
// home with clock now and alice's keys pinned, and the source alice's
// records reach it from: the same records, keys and so verdicts on
// every run.
func seededReceiver(t *testing.T, now func() time.Time) (alice *identity.Identity, bob *Node, src Source) {
	t.Helper()
	alice, bobHome, bobID := seededIdentities(t)
	bob, err := Open(Options{Home: bobHome, Group: "alpha", Identity: bobID, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { bob.Close() })
	if err := bob.PinPeer(context.Background(), alice.NodeID, alice.PublicKey(), alice.X25519.PublicKey().Bytes(), "alice"); err != nil {
		t.Fatal(err)
	}
	return alice, bob, Source{PeerID: "p", NodeID: alice.NodeID, AuthorKey: alice.PublicKeyB64(), AuthorE2E: alice.E2EPublicKeyDER(), Via: "test"}
}
