package mesh_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cmbnode/cmbnode/cmb"
	"github.com/cmbnode/cmbnode/node"
	"github.com/cmbnode/cmbnode/node/identity"
)

// seed stores n records of one author on every member, as if gossip had
// brought them: created 1.1 s apart (each in a second of its own, so the
// finest digest has a bucket per record), ending an hour ago. It returns
// their keys, oldest first.
func seed(t testing.TB, n int, ms ...*member) []string {
	t.Helper()
	author, err := identity.Create(t.TempDir(), "author", nil)
	if err != nil {
		t.Fatal(err)
	}
	grp := ms[0].n.Group()
	base := time.Now().Add(-time.Hour).UnixMilli() - int64(n)*1100
	recs := make([]*cmb.Record, n)
	for i := range recs {
		var f cmb.Fields
		f[cmb.Focus].Text = fmt.Sprintf("seeded record %d: %s", i, "some text of the length an agent's note has, a sentence or two about what it did and why")
		recs[i], err = cmb.Build(cmb.Draft{Fields: f, Group: grp, CreatedBy: author.NodeID, CreatedAt: base + int64(i)*1100}, author.Ed25519)
		if err != nil {
			t.Fatal(err)
		}
	}
	pub := author.PublicKeyB64()
	ctx := context.Background()
	for _, mb := range ms {
		var next atomic.Int64
		var wg sync.WaitGroup
		for range 16 { // concurrent commits share fsyncs
			wg.Go(func() {
				for i := next.Add(1) - 1; i < int64(n); i = next.Add(1) - 1 {
					c, err := mb.n.Check(ctx, recs[i], node.Source{PeerID: "seed", AuthorKey: pub, Via: "gossip"})
					if err == nil {
						_, err = mb.n.Accept(ctx, c)
					}
					if err != nil {
						t.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
	}
	if t.Failed() {
		t.FailNow()
	}
	keys := make([]string, n)
	for i, r := range recs {
		keys[i] = r.Key
	}
	return keys
}
