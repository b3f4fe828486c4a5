package mcpnode

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/cmbnode/cmbnode/node"
)

func connect(t *testing.T, srv *mcp.Server) *mcp.ClientSession {
	t.Helper()
	st, ct := mcp.NewInMemoryTransports()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go srv.Run(ctx, st)
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

// TestAddToolAsSDK holds addTool to mcp.AddTool: the same tool list, and
// the same result for good, bad and absent arguments and for a handler
// error (structuredContent compared as JSON values: only its member order
// differs).
func TestAddToolAsSDK(t *testing.T) {
	score := 0.5
	handler := func(_ context.Context, _ *mcp.CallToolRequest, in recallIn) (*mcp.CallToolResult, RecallOut, error) {
		if in.Query == "fail" {
			return nil, RecallOut{}, errors.New("recall: it failed")
		}
		out := RecallOut{Query: in.Query, Results: []Memory{{Key: "cmb1-ab", Author: "n", Time: "t", Group: "g",
			Fields: Fields{Focus: node.FieldJSON{Text: "<b>&" + strings.Repeat("x", in.Limit)}}, Score: &score}}}
		if in.Limit == 2 {
			return nil, out, nil // no content: the JSON is the text
		}
		return textResult("text\n"), out, nil
	}
	tool := func() *mcp.Tool {
		return &mcp.Tool{Name: "recall", Description: "d", InputSchema: schemaFor[recallIn](func(p map[string]*jsonschema.Schema) {
			p["query"].MinLength = maxLen(1)
			limitInt(p, "limit", 1, maxRecall, defaultRecall)
		})}
	}
	sdk := mcp.NewServer(&mcp.Implementation{Name: "x"}, nil)
	mcp.AddTool(sdk, tool(), handler)
	ours := mcp.NewServer(&mcp.Implementation{Name: "x"}, nil)
	addTool(ours, false, tool(), handler)
	a, b := connect(t, sdk), connect(t, ours)
	ctx := context.Background()

	la, err := a.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	lb, err := b.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	ja, _ := json.Marshal(la)
	jb, _ := json.Marshal(lb)
	if string(ja) != string(jb) {
		t.Errorf("tools/list differs:\nmcp.AddTool %s\naddTool     %s", ja, jb)
	}

	for _, args := range []any{
		nil, map[string]any{}, map[string]any{"query": "q"}, map[string]any{"query": "q", "limit": 10.0},
		map[string]any{"query": "q", "limit": 2}, map[string]any{"query": "q", "limit": 1.5},
		map[string]any{"query": "q", "limit": 99}, map[string]any{"query": 3}, map[string]any{"query": ""},
		map[string]any{"query": "q", "Limit": 3}, map[string]any{"query": "fail"}, json.RawMessage("null"),
		json.RawMessage(`{"query":"q","limit":10.0}`), json.RawMessage(`{"query":"q","limit":1e1}`),
	} {
		ra, errA := a.CallTool(ctx, &mcp.CallToolParams{Name: "recall", Arguments: args})
		rb, errB := b.CallTool(ctx, &mcp.CallToolParams{Name: "recall", Arguments: args})
		if (errA == nil) != (errB == nil) || (errA != nil && errA.Error() != errB.Error()) {
			t.Errorf("%v: errors differ: %v / %v", args, errA, errB)
			continue
		}
		if errA != nil {
			continue
		}
		if !reflect.DeepEqual(ra.StructuredContent, rb.StructuredContent) || ra.IsError != rb.IsError {
			t.Errorf("%v: results differ:\n%#v\n%#v", args, ra, rb)
		}
		ca, _ := json.Marshal(ra.Content)
		cb, _ := json.Marshal(rb.Content)
		if args, ok := args.(map[string]any); ok && args["limit"] == 2 {
			// The text fallback is the JSON, in each one's member order.
			var va, vb any
			json.Unmarshal([]byte(ra.Content[0].(*mcp.TextContent).Text), &va)
			json.Unmarshal([]byte(rb.Content[0].(*mcp.TextContent).Text), &vb)
			if len(ra.Content) != 1 || len(rb.Content) != 1 || !reflect.DeepEqual(va, vb) {
				t.Errorf("%v: fallback text differs:\n%s\n%s", args, ca, cb)
			}
		} else if string(ca) != string(cb) {
			t.Errorf("%v: content differs:\n%s\n%s", args, ca, cb)
		}
	}
}

type badOut struct{ N int }

func (badOut) MarshalJSON() ([]byte, error) { return []byte(`{"N":"not a number"}`), nil }

// TestAddToolChecksOutput: with the check on (as the tests against the
// binary turn it on) a result that strays from its schema is an
// error, as under mcp.AddTool; without it, it is sent.
func TestAddToolChecksOutput(t *testing.T) {
	for _, check := range []bool{true, false} {
		srv := mcp.NewServer(&mcp.Implementation{Name: "x"}, nil)
		addTool(srv, check, &mcp.Tool{Name: "bad", InputSchema: schemaFor[noArgs](nil)},
			func(context.Context, *mcp.CallToolRequest, noArgs) (*mcp.CallToolResult, badOut, error) {
				return nil, badOut{}, nil
			})
		_, err := connect(t, srv).CallTool(context.Background(), &mcp.CallToolParams{Name: "bad"})
		if check && (err == nil || !strings.Contains(err.Error(), "validating tool output")) {
			t.Errorf("checked: %v, want a tool output validation error", err)
		}
		if !check && err != nil {
			t.Errorf("unchecked: %v", err)
		}
	}
}

// TestStructuredSendsTheSameBytes: handing the SDK the output value puts
// the same bytes on the wire as handing it the value's JSON (which a
// checked result, and one without text, still get), HTML escapes included.
func TestStructuredSendsTheSameBytes(t *testing.T) {
	raw := recallReplyJSON(t, 3)
	r, err := decodeRecall(raw)
	if err != nil {
		t.Fatal(err)
	}
	r.Results[1].Fields.Focus.Text = `<b>"&"</b> ü` + "\u2028"
	wire := func(res *mcp.CallToolResult) string {
		var b strings.Builder
		enc := json.NewEncoder(&b)
		enc.SetEscapeHTML(false) // as the SDK's jsonrpc2
		if err := enc.Encode(res); err != nil {
			t.Fatal(err)
		}
		return b.String()
	}
	res, out := recallResult("q <&>", r.Results, nil, nil)
	typed, err := structured(res, out, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := typed.StructuredContent.(RecallOut); !ok {
		t.Fatalf("structuredContent is a %T", typed.StructuredContent)
	}
	got := wire(typed)
	b, _ := json.Marshal(out)
	res.StructuredContent = json.RawMessage(b)
	if want := wire(res); got != want {
		t.Errorf("typed:\n%s\nJSON:\n%s", got, want)
	}
}
