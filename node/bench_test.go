package node

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"fmt"
	mrand "math/rand"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cmbnode/cmbnode/cmb"
	"github.com/cmbnode/cmbnode/internal/benchtext"
	"github.com/cmbnode/cmbnode/node/identity"
)

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkReceive is the receive path from a checked-out frame to a
// durable record: Check (group, author key, address, signature, lineage)
// then Accept (the store's group commit), with 8 records in flight as the
// gossip validators and store workers keep them. Standard records: seven
// 300-byte fields of Zipf-distributed made-up words, as the two-daemon
// delivery benchmark sends (text that is all one letter would make every
// record a text match of every other). It reports the process CPU per accepted record beside a
// bare ed25519.Verify, and the durable commits per 1,000 records received.
//
// Its records were made in 2025, so every anchor is far older than SVAF's
// freshness τ and weighs nothing: SVAF admits them all to bootstrap.
// BenchmarkReceiveFresh sends records made seconds before, as live gossip
// is, which SVAF judges in full.
func BenchmarkReceive(b *testing.B) { benchReceive(b, 1_751_000_000_000) }

// BenchmarkReceiveFresh is BenchmarkReceive with records made just before
// they are received.
func BenchmarkReceiveFresh(b *testing.B) { benchReceive(b, time.Now().UnixMilli()-int64(b.N)) }

// benchReceive receives b.N records whose createdAt run from first, 1 ms apart.
func benchReceive(b *testing.B, first int64) {
	ctx := context.Background()
	aliceID, bob := receivingPair(ctx, b)
	var err error
	recs := make([]*cmb.Record, b.N)
	r := mrand.New(mrand.NewSource(1))
	vocab := benchtext.Vocab(r, 4096)
	z := mrand.NewZipf(r, 1.1, 1, uint64(len(vocab)-1))
	for i := range recs {
		var f cmb.Fields
		for j := range f {
			f[j].Text = benchtext.Field(fmt.Sprintf("%s %d:", cmb.FieldNames[j], i), 300, vocab, z)
		}
		if recs[i], err = cmb.Build(cmb.Draft{Fields: f, Group: "alpha", CreatedBy: aliceID.NodeID, CreatedAt: first + int64(i)}, aliceID.Ed25519); err != nil {
			b.Fatal(err)
		}
	}
	src := Source{PeerID: "peer-alice", NodeID: aliceID.NodeID, AuthorKey: aliceID.PublicKeyB64(), AuthorE2E: aliceID.E2EPublicKeyDER(), Via: "bench"}
	before, err := bob.Store().Stats(ctx)
	if err != nil {
		b.Fatal(err)
	}
	next := make(chan *cmb.Record)
	var wg sync.WaitGroup
	var failed sync.Once
	b.ResetTimer()
	cpu0, t0 := cpuTime(), time.Now()
	for range 8 {
		wg.Go(func() {
			for r := range next {
				c, err := bob.Check(ctx, r, src)
				if err == nil {
					_, err = bob.Accept(ctx, c)
				}
				if err != nil {
					failed.Do(func() { b.Error(err) })
				}
			}
		})
	}
	for _, r := range recs {
		next <- r
	}
	close(next)
	wg.Wait()
	cpu, el := cpuTime()-cpu0, time.Since(t0)
	b.StopTimer()
	after, err := bob.Store().Stats(ctx)
	if err != nil {
		b.Fatal(err)
	}
	if got := bob.Counters.Accepted.Load(); got != int64(b.N) {
		b.Fatalf("accepted %d of %d", got, b.N)
	}
	// The reference: one bare verify of a signature payload, same process.
	payload := recs[0].SigPayload()
	sig := ed25519.Sign(aliceID.Ed25519, payload)
	pub := aliceID.PublicKey()
	const verifies = 2000
	v0 := time.Now()
	for range verifies {
		ed25519.Verify(pub, payload, sig)
	}
	bare := time.Since(v0) / verifies
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-µs/record")
	b.ReportMetric(float64(bare.Nanoseconds())/1000, "µs/bare-verify")
	b.ReportMetric(float64(after.Commits-before.Commits)*1000/float64(b.N), "commits/1000-records")
	b.ReportMetric(float64(b.N)/el.Seconds(), "records/s")
}

// receivingPair is alice's identity and bob's node, open on a home of its
// own in group alpha with alice's keys pinned: bob receives what alice
// signs.
func receivingPair(ctx context.Context, b *testing.B) (*identity.Identity, *Node) {
	b.Helper()
	aliceID, err := identity.Create(b.TempDir(), "alice", rand.Reader)
	if err != nil {
		b.Fatal(err)
	}
	bobHome := b.TempDir()
	bobID, err := identity.Create(bobHome, "bob", rand.Reader)
	if err != nil {
		b.Fatal(err)
	}
	bob, err := Open(Options{Home: bobHome, Group: "alpha", Identity: bobID})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { bob.Close() })
	if err := bob.PinPeer(ctx, aliceID.NodeID, aliceID.PublicKey(), aliceID.X25519.PublicKey().Bytes(), "alice"); err != nil {
		b.Fatal(err)
	}
	return aliceID, bob
}
