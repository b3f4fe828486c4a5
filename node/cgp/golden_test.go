package cgp_test

import (
	"bytes"
	"context"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cmbnode/cmbnode/node/cgp"
	"github.com/cmbnode/cmbnode/node/cgp/cgptest"
)

var update = flag.Bool("update", false, "rewrite golden files")

// TestGoldenSession: a fixed store, key, clock and transcript give
// byte-identical output. Any change to rendering, ranking, ids, digests or
// attestations shows up here and must be deliberate (-update).
func TestGoldenSession(t *testing.T) {
	e, _, err := cgptest.NewEngine(cgptest.CorpusSize, cgptest.CorpusSeed)
	if err != nil {
		t.Fatal(err)
	}
	in := strings.Join([]string{
		`{"type":"handshake","protocol_version":"contextgraph/1.0-draft"}`,
		`{"type":"query","id":"g1","query":` + cgptest.SampleQuery + `}`,
		`{"type":"query","id":"g2","query":{"goal":"retry","query_text":"retry policy backoff","kinds":["episode"],"max_frames":3,"max_tokens":900,"as_of":"2026-09-01T00:00:00Z"}}`,
		`{"type":"verify","id":"g3","request":{"frames":[{"provider_id":"cmbnode","frame_id":"memory:cmb1-nope","content_digest":"sha256:00"}]}}`,
	}, "\n") + "\n"
	var out bytes.Buffer
	// Concurrency 1 keeps reply order equal to request order.
	if err := cgp.Serve(context.Background(), strings.NewReader(in), &out, e, cgp.ServeOptions{Concurrency: 1}); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join("testdata", "golden", "session.ndjson")
	if *update {
		if err := os.WriteFile(path, out.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create)", err)
	}
	if !bytes.Equal(out.Bytes(), want) {
		t.Errorf("output differs from %s; diff it or rerun with -update if the change is intended\ngot:\n%s", path, out.String())
	}
	if n := strings.Count(out.String(), "\n"); n != 4 {
		t.Errorf("%d reply lines, want 4", n)
	}
}
