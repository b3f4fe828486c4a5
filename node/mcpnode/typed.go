package mcpnode

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// addTool is mcp.AddTool without its check of our own results: it
// advertises the same input and output schemas, validates and decodes the
// arguments the same way, and turns a handler's error into the same tool
// error; but the result goes to the SDK as it is, marshalled once with
// the rest of the response, where mcp.AddTool marshals it, decodes it
// again into a generic value, validates that against the output schema
// and marshals it a second time. For a recall of ten
// memories (16 kB on the wire) that check cost more than half a
// millisecond a call: a third of the MCP layer's overhead, spent proving
// that a Go struct matches the schema inferred from that very struct.
//
// The one difference on the wire is the order of structuredContent's
// members: the Go fields' order, not sorted (the SDK's second marshal goes
// through a map). With check (Options.CheckOutput, which the tests against
// the built binary turn on) a result that strays from its schema (a custom
// marshaller, say) is an error, as under mcp.AddTool.
func addTool[In, Out any](srv *mcp.Server, check bool, t *mcp.Tool, h mcp.ToolHandlerFor[In, Out]) {
	in, ok := t.InputSchema.(*jsonschema.Schema)
	if !ok || in == nil {
		panic(fmt.Sprintf("tool %q: the input schema is not a *jsonschema.Schema", t.Name))
	}
	inResolved, err := in.Resolve(&jsonschema.ResolveOptions{ValidateDefaults: true})
	if err != nil {
		panic(fmt.Sprintf("tool %q: input schema: %v", t.Name, err))
	}
	// What mcp.AddTool infers for a non-pointer Out.
	out, err := jsonschema.ForType(reflect.TypeFor[Out](), &jsonschema.ForOptions{})
	if err != nil {
		panic(fmt.Sprintf("tool %q: output schema: %v", t.Name, err))
	}
	outResolved, err := out.Resolve(&jsonschema.ResolveOptions{ValidateDefaults: true})
	if err != nil {
		panic(fmt.Sprintf("tool %q: output schema: %v", t.Name, err))
	}
	tt := *t
	tt.OutputSchema = out
	srv.AddTool(&tt, func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		args, err := validArgs(req.Params.Arguments, inResolved)
		if err != nil {
			return toolError(fmt.Errorf("validating \"arguments\": %v", err)), nil
		}
		var in In
		if args != nil {
			if err := json.Unmarshal(args, &in); err != nil {
				return toolError(err), nil
			}
		}
		res, out, err := h(ctx, req, in)
		if err != nil {
			if wireErr, ok := err.(*jsonrpc.Error); ok {
				return nil, wireErr
			}
			return toolError(err), nil
		}
		return structured(res, out, check, outResolved)
	})
}

// structured completes a handler's result with its output: the value
// itself as structuredContent, and the JSON as the text when the handler
// wrote none. With check, the JSON is validated against the output schema
// first, and sent as checked.
func structured[Out any](res *mcp.CallToolResult, out Out, check bool, schema *jsonschema.Resolved) (*mcp.CallToolResult, error) {
	if res == nil {
		res = &mcp.CallToolResult{}
	}
	if !check && res.Content != nil {
		// The value, not its JSON: the SDK marshals the whole result
		// anyway, and encoding/json re-scans (compacts) a json.RawMessage
		// byte by byte, which for a recall's 9 kB of structured content
		// is one pass more on every call.
		res.StructuredContent = out
		return res, nil
	}
	b, err := json.Marshal(out)
	if err != nil {
		return nil, fmt.Errorf("marshaling output: %w", err)
	}
	if check {
		if err := validOutput(b, schema); err != nil {
			return nil, fmt.Errorf("validating tool output: %w", err)
		}
	}
	res.StructuredContent = json.RawMessage(b)
	if res.Content == nil {
		// Every Out is a struct, so its JSON is an object: the text
		// fallback the SDK adds is just the JSON.
		res.Content = []mcp.Content{&mcp.TextContent{Text: string(b)}}
	}
	return res, nil
}

func toolError(err error) *mcp.CallToolResult {
	var r mcp.CallToolResult
	r.SetError(err)
	return &r
}

// validArgs is the SDK's validation of tool arguments: decoded into an
// object (absent arguments are {}), defaults applied, validated, and
// encoded again, so a value the schema admits decodes into In (10.0 for an
// integer becomes 10).
func validArgs(data json.RawMessage, r *jsonschema.Resolved) (json.RawMessage, error) {
	v := map[string]any{}
	if len(data) > 0 {
		if err := json.Unmarshal(data, &v); err != nil {
			return nil, fmt.Errorf("unmarshaling arguments: %w", err)
		}
	}
	var a any = v
	if err := r.ApplyDefaults(&a); err != nil {
		return nil, fmt.Errorf("applying schema defaults:\n%w", err)
	}
	if err := r.Validate(&a); err != nil {
		return nil, err
	}
	b, err := json.Marshal(a)
	if err != nil {
		return nil, fmt.Errorf("marshalling with defaults: %v", err)
	}
	return b, nil
}

// validOutput checks a result's JSON against the tool's output schema.
func validOutput(b []byte, r *jsonschema.Resolved) error {
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		return fmt.Errorf("unmarshaling output: %w", err)
	}
	return r.Validate(&v)
}
