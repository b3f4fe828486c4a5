package node

import (
	"crypto/rand"
	"fmt"
	mrand "math/rand"
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
