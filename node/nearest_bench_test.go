package node

import (
	"context"
	"testing"
	"time"

	"github.com/cmbnode/cmbnode/cmb"
)

// liveMemory is bob, holding stored standard records received in the
// minutes before now, and judged more records made just after them, not
// stored: a live memory and the records arriving at it.
func liveMemory(b *testing.B, stored, judged int) (*Node, []*cmb.Record) {
	ctx := context.Background()
	aliceID, bob := receivingPair(ctx, b)
	src := Source{PeerID: "peer-alice", NodeID: aliceID.NodeID, AuthorKey: aliceID.PublicKeyB64(), AuthorE2E: aliceID.E2EPublicKeyDER(), Via: "bench"}
	fields := standardFields(stored + judged)
	first := time.Now().Add(-10 * time.Minute).UnixMilli()
	recs := make([]*cmb.Record, len(fields))
	for i, f := range fields {
		var err error
		if recs[i], err = cmb.Build(cmb.Draft{Fields: f, Group: "alpha", CreatedBy: aliceID.NodeID, CreatedAt: first + int64(i)*100}, aliceID.Ed25519); err != nil {
			b.Fatal(err)
		}
	}
	for _, r := range recs[:stored] {
		c, err := bob.Check(ctx, r, src)
		if err == nil {
			_, err = bob.Accept(ctx, c)
		}
		if err != nil {
			b.Fatal(err)
		}
	}
	return bob, recs[stored:]
}

// BenchmarkNearest is the anchor lookup alone (the record's near-copy
// signature, then judge's anchors: the recent anchors and its near-copies) of
// a live record against BenchmarkJudge's memory of 3,000 standard
// records; it reports the process CPU per lookup.
func BenchmarkNearest(b *testing.B) {
	ctx := context.Background()
	bob, judged := liveMemory(b, 3000, 256)
	b.ReportAllocs()
	cpu0, n := cpuTime(), 0
	for ; b.Loop(); n++ {
		rec := judged[n%len(judged)]
		all := rec.Fields.Texts()
		if _, err := anchorsOf(ctx, bob, rec.Group, sigOf(bob, &all)); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64((cpuTime()-cpu0).Microseconds())/float64(n), "cpu-µs/lookup")
}
