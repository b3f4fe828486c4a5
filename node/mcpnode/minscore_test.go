package mcpnode

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/cmbnode/cmbnode/cmb"
	"github.com/cmbnode/cmbnode/node"
)

// TestRecallMinScore: the recall tool's min_score leaves out the memories
// the socket's recall scores below it, and the schema refuses one above 1.
func TestRecallMinScore(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n, cs := relayedNode(t, ctx, "mcp-min", &syncingMesh{})
	for _, text := range []string{"release plan drafted for the parser", "the parser needs a new logo, a mascot and a website"} {
		var f cmb.Fields
		f[cmb.Focus].Text = text
		if _, err := n.Remember(ctx, node.RememberInput{Fields: f}); err != nil {
			t.Fatal(err)
		}
	}
	recall := func(args map[string]any) (RecallOut, *mcp.CallToolResult, error) {
		t.Helper()
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "recall", Arguments: args})
		if err != nil || res.IsError {
			return RecallOut{}, res, err
		}
		var out RecallOut
		raw, _ := json.Marshal(res.StructuredContent)
		if err := json.Unmarshal(raw, &out); err != nil {
			t.Fatal(err)
		}
		return out, res, nil
	}
	all, res, err := recall(map[string]any{"query": "release plan parser"})
	if err != nil || res.IsError || len(all.Results) != 2 || all.Results[0].Score == nil || all.Results[1].Score == nil {
		t.Fatalf("recall without min_score: %+v %+v %v", all, res, err)
	}
	hi, lo := *all.Results[0].Score, *all.Results[1].Score
	if hi <= lo {
		t.Fatalf("scores %v, %v: want the first higher", hi, lo)
	}
	some, res, err := recall(map[string]any{"query": "release plan parser", "min_score": (hi + lo) / 2})
	if err != nil || res.IsError || len(some.Results) != 1 || some.Results[0].Key != all.Results[0].Key {
		t.Fatalf("recall with min_score between the two scores: %+v %+v %v, want the better one alone", some, res, err)
	}
	if _, res, err := recall(map[string]any{"query": "release", "min_score": 1.5}); err == nil && !res.IsError {
		t.Fatalf("min_score 1.5 was accepted: %+v", res)
	}
}
