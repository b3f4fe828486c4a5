package node

import (
	"context"
	"crypto/rand"
	"fmt"
	mrand "math/rand"
	"sync"
	"testing"
	"time"

	"github.com/cmbnode/cmbnode/cmb"
	"github.com/cmbnode/cmbnode/internal/benchtext"
	"github.com/cmbnode/cmbnode/node/identity"
)

// BenchmarkFrameToEntry is what a receiver does with a gossiped cmb frame
// before its checks and after them, short of the signature and the store:
// cmb.ParseFrame, then entryOf (the record's stored bytes and texts).
// Standard records (seven 300-byte fields of Zipf-distributed words), in
// frames as cmbnode sends them, author keys included; 64 distinct frames
// taken in turn.
func BenchmarkFrameToEntry(b *testing.B) {
	id, err := identity.Create(b.TempDir(), "alice", rand.Reader)
	if err != nil {
		b.Fatal(err)
	}
	r := mrand.New(mrand.NewSource(1))
	vocab := benchtext.Vocab(r, 4096)
	z := mrand.NewZipf(r, 1.1, 1, uint64(len(vocab)-1))
	frames := make([][]byte, 64)
	now := time.Now().UnixMilli()
	for i := range frames {
		var f cmb.Fields
		for j := range f {
			f[j].Text = benchtext.Field(fmt.Sprintf("%s %d:", cmb.FieldNames[j], i), 300, vocab, z)
		}
		rec, err := cmb.Build(cmb.Draft{Fields: f, Group: "alpha", CreatedBy: id.NodeID, CreatedAt: now + int64(i)}, id.Ed25519)
		if err != nil {
			b.Fatal(err)
		}
		if frames[i], err = cmb.MarshalFrame(&cmb.CMBFrame{Timestamp: now, CMB: rec, PublicKey: id.PublicKeyB64(), E2EPublicKey: id.E2EPublicKeyDER()}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	b.SetBytes(int64(len(frames[0])))
	i := 0
	for b.Loop() {
		f, err := cmb.ParseFrame(frames[i%len(frames)])
		if err != nil {
			b.Fatal(err)
		}
		e := entryOf(f.(*cmb.CMBFrame).CMB)
		if len(e.Raw) == 0 {
			b.Fatal("no raw")
		}
		i++
	}
}

// BenchmarkReceiveFreshFrames is BenchmarkReceiveFresh with each record
// arriving as a cmb frame's bytes, as gossip delivers it: the workers
// parse the frame (cmb.ParseFrame) before Check and Accept. It reports
// the process CPU per accepted record.
func BenchmarkReceiveFreshFrames(b *testing.B) {
	ctx := context.Background()
	aliceID, bob := receivingPair(ctx, b)
	r := mrand.New(mrand.NewSource(1))
	vocab := benchtext.Vocab(r, 4096)
	z := mrand.NewZipf(r, 1.1, 1, uint64(len(vocab)-1))
	first := time.Now().UnixMilli() - int64(b.N)
	frames := make([][]byte, b.N)
	for i := range frames {
		var f cmb.Fields
		for j := range f {
			f[j].Text = benchtext.Field(fmt.Sprintf("%s %d:", cmb.FieldNames[j], i), 300, vocab, z)
		}
		rec, err := cmb.Build(cmb.Draft{Fields: f, Group: "alpha", CreatedBy: aliceID.NodeID, CreatedAt: first + int64(i)}, aliceID.Ed25519)
		if err != nil {
			b.Fatal(err)
		}
		if frames[i], err = cmb.MarshalFrame(&cmb.CMBFrame{Timestamp: first, CMB: rec, PublicKey: aliceID.PublicKeyB64(), E2EPublicKey: aliceID.E2EPublicKeyDER()}); err != nil {
			b.Fatal(err)
		}
	}
	src := Source{PeerID: "peer-alice", NodeID: aliceID.NodeID, AuthorKey: aliceID.PublicKeyB64(), AuthorE2E: aliceID.E2EPublicKeyDER(), Via: "bench"}
	next := make(chan []byte)
	var wg sync.WaitGroup
	var failed sync.Once
	b.ResetTimer()
	cpu0 := cpuTime()
	for range 8 {
		wg.Go(func() {
			for p := range next {
				f, err := cmb.ParseFrame(p)
				if err == nil {
					var c *Checked
					if c, err = bob.Check(ctx, f.(*cmb.CMBFrame).CMB, src); err == nil {
						_, err = bob.Accept(ctx, c)
					}
				}
				if err != nil {
					failed.Do(func() { b.Error(err) })
				}
			}
		})
	}
	for _, p := range frames {
		next <- p
	}
	close(next)
	wg.Wait()
	cpu := cpuTime() - cpu0
	b.StopTimer()
	if got := bob.Counters.Accepted.Load(); got != int64(b.N) {
		b.Fatalf("accepted %d of %d", got, b.N)
	}
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-µs/record")
}
