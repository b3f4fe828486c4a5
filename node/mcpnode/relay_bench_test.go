package mcpnode

import (
	"bytes"
	"encoding/json"
	"math/rand"
	"reflect"
	"testing"

	"github.com/cmbnode/cmbnode/cmb"
	"github.com/cmbnode/cmbnode/internal/benchtext"
	"github.com/cmbnode/cmbnode/node"
	"github.com/cmbnode/cmbnode/node/ipc"
)

// BenchmarkRecallRelay is what `cmbnode mcp` does with a socket recall
// reply of ten hits (seven filled fields of 60 to 120 bytes, a mood with
// valence and arousal, as BenchmarkMCPRecall's store holds): decode it,
// build and render the result, complete it as addTool does, and marshal
// it as the SDK then does into its response. The SDK's work on the request
// and its envelope is left out.
func BenchmarkRecallRelay(b *testing.B) {
	raw := recallReplyJSON(b, 10)
	b.SetBytes(int64(len(raw)))
	b.ReportAllocs()
	var buf bytes.Buffer
	wrote := 0
	for b.Loop() {
		r, err := decodeRecall(raw)
		if err != nil {
			b.Fatal(err)
		}
		res, out := recallResult("release notes", r.Results, r.Sync, map[string]string{r.Results[0].CreatedBy: "ada"})
		if res, err = structured(res, out, false, nil); err != nil {
			b.Fatal(err)
		}
		// As the SDK's jsonrpc2 marshals a result into its response.
		buf.Reset()
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(res); err != nil {
			b.Fatal(err)
		}
		wrote += buf.Len()
	}
	b.ReportMetric(float64(wrote)/float64(b.N), "result-B/op")
}

// recallReplyJSON is a socket recall reply of n hits as the daemon sends it.
func recallReplyJSON(tb testing.TB, n int) []byte {
	tb.Helper()
	r := rand.New(rand.NewSource(3))
	vocab := benchtext.Vocab(r, 2000)
	z := rand.NewZipf(r, 1.1, 2, uint64(len(vocab)-1))
	authors := []string{"01a2330c-fe57-730e-b02b-b9dd8ad263c0", "01a2330c-fe57-730e-b02b-b9dd8ad263c1"}
	var reply ipc.RecallReply
	for i := range n {
		var f cmb.Fields
		for j, name := range cmb.FieldNames {
			f[j].Text = benchtext.Field(name+":", 60+r.Intn(60), vocab, z)
		}
		v, a := r.Float64()*2-1, r.Float64()*2-1
		f[cmb.Mood].Text, f[cmb.Mood].Valence, f[cmb.Mood].Arousal = "relieved", &v, &a
		reply.Results = append(reply.Results, node.RecallHit{
			Key:       "cmb1-2bd0cd3c94d472b516ae0a70bd2f4a192d2754d3d0c23afe5f58fc054b0bb4" + string(rune('a'+i)) + "1",
			CreatedBy: authors[i%2], CreatedAt: 1_780_000_000_000 + int64(i), Group: "default",
			Fields: node.FieldsView(&f), Score: 0.9 - float64(i)/50,
		})
	}
	raw, err := json.Marshal(reply)
	if err != nil {
		tb.Fatal(err)
	}
	return raw
}

// TestDecodeRecall: the recall tool reads the socket's reply as the socket
// client does (ipc.RecallReply, encoding/json), whatever the texts hold:
// escapes, HTML, line and paragraph separators, non-ASCII, and fields the
// daemon left out (neutral, as fieldsOf reads them).
func TestDecodeRecall(t *testing.T) {
	raw := recallReplyJSON(t, 10)
	var hits []map[string]any
	var head map[string]json.RawMessage
	json.Unmarshal(raw, &head)
	json.Unmarshal(head["results"], &hits)
	odd := []string{"quote \" back \\ slash", "<b>&amp;</b>", "line\u2028para\u2029", "tab\tnew\nline", "émoji 🎉 ü", "\x01\x1f ctl"}
	for i, h := range hits {
		fields := h["fields"].(map[string]any)
		fields["focus"] = map[string]any{"text": odd[i%len(odd)]}
		if i == 3 {
			delete(fields, "perspective")
		}
	}
	hits[0]["score"] = 0.1 + 0.2 // a float that does not round-trip in fewer digits
	head["results"], _ = json.Marshal(hits)
	head["sync"] = json.RawMessage(`{"syncing":true,"received":5,"expected":9,"peers":1}`)
	raw, _ = json.Marshal(head)

	var want ipc.RecallReply
	if err := json.Unmarshal(raw, &want); err != nil {
		t.Fatal(err)
	}
	got, err := decodeRecall(raw)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Results) != len(want.Results) || got.Sync == nil || *got.Sync != *want.Sync {
		t.Fatalf("decoded %d hits, sync %+v; want %d, %+v", len(got.Results), got.Sync, len(want.Results), want.Sync)
	}
	for i, w := range want.Results {
		g := got.Results[i]
		wf := fieldsOf(w.Fields)
		if g.Key != w.Key || g.CreatedBy != w.CreatedBy || g.CreatedAt != w.CreatedAt || g.Group != w.Group || g.Score != w.Score ||
			!reflect.DeepEqual(g.Fields, wf) {
			t.Errorf("hit %d:\n got %+v\nwant %+v %+v", i, g, w, wf)
		}
	}
	if got.Results[3].Fields.Perspective.Text != cmb.Neutral {
		t.Errorf("a field left out reads %q", got.Results[3].Fields.Perspective.Text)
	}
	for _, bad := range []string{``, `{`, `{"results":[{"key":1}]}`, `{"results":{}}`, `{"results":[{"fields":{"focus":{"text":"x"}}]`,
		`{"results":[]} x`, `{"results":[{"createdAt":1.5}]}`} {
		if _, err := decodeRecall([]byte(bad)); err == nil {
			t.Errorf("%q decoded", bad)
		}
	}
}
