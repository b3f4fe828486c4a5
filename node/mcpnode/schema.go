package mcpnode

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/google/jsonschema-go/jsonschema"

	"github.com/cmbnode/cmbnode/cmb"
)

// Limits on tool arguments, stated in docs/mcp.md. The input schemas carry
// them, so the SDK refuses an oversized argument with a tool error before a
// handler runs; MaxRequest bounds a whole JSON-RPC message (transport.go).
const (
	// MaxFieldChars bounds one field's text. At most 4 UTF-8 bytes a
	// character, a text the schema admits fits cmb.MaxFieldBytes, so the
	// node never refuses one as too long.
	MaxFieldChars = cmb.MaxFieldBytes / 4
	MaxQueryChars = 1024 // a recall query
	MaxRefChars   = 128  // a key or key prefix (a full key is 69)
	MaxNameChars  = 256  // an author or recipient: a nodeId or a name
	MaxTimeChars  = 64   // a since/until value
	MaxParents    = cmb.MaxParents
	// MaxRequest bounds one JSON-RPC message from the host: the daemon
	// socket's own cap, so any request admitted can be relayed.
	MaxRequest = 1 << 20

	defaultRecall, maxRecall = 10, 50
	defaultRecent, maxRecent = 20, 100
	defaultThread, maxThread = 24, 200
)

// schemaFor infers T's input schema (the jsonschema tags describe each
// property) and lets patch add the bounds inference cannot express.
func schemaFor[T any](patch func(props map[string]*jsonschema.Schema)) *jsonschema.Schema {
	s, err := jsonschema.For[T](nil)
	if err != nil {
		panic(fmt.Sprintf("schema for %T: %v", *new(T), err)) // a programming error, found by every test
	}
	if patch != nil {
		patch(s.Properties)
	}
	return s
}

func maxLen(n int) *int      { return &n }
func num(f float64) *float64 { return &f }

func limitText(props map[string]*jsonschema.Schema, n int, names ...string) {
	for _, name := range names {
		props[name].MaxLength = maxLen(n)
	}
}

// limitInt bounds an integer argument. Its default is stated in the
// description, not as a schema default: the SDK applies defaults by writing
// into the arguments object and panics when a host sends "arguments": null.
func limitInt(props map[string]*jsonschema.Schema, name string, lo, hi, def int) {
	p := props[name]
	p.Minimum, p.Maximum = num(float64(lo)), num(float64(hi))
	p.Description += fmt.Sprintf(" (%d to %d; default %d)", lo, hi, def)
}

// mood is a mood given as plain text or as {text, valence, arousal}.
type mood struct {
	Text    string   `json:"text"`
	Valence *float64 `json:"valence,omitempty"`
	Arousal *float64 `json:"arousal,omitempty"`
}

func (m *mood) UnmarshalJSON(b []byte) error {
	if len(b) > 0 && b[0] == '"' {
		return json.Unmarshal(b, &m.Text)
	}
	type plain mood
	return json.Unmarshal(b, (*plain)(m))
}

func moodSchema() *jsonschema.Schema {
	unit := func(d string) *jsonschema.Schema {
		return &jsonschema.Schema{Type: "number", Minimum: num(-1), Maximum: num(1), Description: d}
	}
	text := func() *jsonschema.Schema { return &jsonschema.Schema{Type: "string", MaxLength: maxLen(MaxFieldChars)} }
	return &jsonschema.Schema{
		Description: `the author's mood: text ("calm"), or {"text","valence","arousal"} with valence and arousal in [-1, 1]`,
		OneOf: []*jsonschema.Schema{
			text(),
			{
				Type:                 "object",
				Properties:           map[string]*jsonschema.Schema{"text": text(), "valence": unit("negative to positive"), "arousal": unit("calm to excited")},
				Required:             []string{"text"},
				AdditionalProperties: &jsonschema.Schema{Not: &jsonschema.Schema{}},
			},
		},
	}
}

// parseTime reads a since/until bound: RFC 3339 ("2026-05-01T09:00:00Z"),
// a date ("2026-05-01", midnight UTC), or an age back from now ("90m",
// "36h", "7d", "2w").
func parseTime(s string, now time.Time) (time.Time, error) {
	s = strings.TrimSpace(s)
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t, nil
	}
	if t, err := time.Parse(time.DateOnly, s); err == nil {
		return t, nil
	}
	if n := len(s); n > 1 && (s[n-1] == 'd' || s[n-1] == 'w') {
		var k float64
		if _, err := fmt.Sscanf(s[:n-1], "%g", &k); err == nil && k >= 0 {
			day := 24 * time.Hour
			if s[n-1] == 'w' {
				day *= 7
			}
			return now.Add(-time.Duration(k * float64(day))), nil
		}
	}
	if d, err := time.ParseDuration(s); err == nil && d >= 0 {
		return now.Add(-d), nil
	}
	return time.Time{}, fmt.Errorf("%q is not a time: use RFC 3339 (2026-05-01T09:00:00Z), a date (2026-05-01) or an age (90m, 36h, 7d, 2w)", cmb.Truncate(s, 64))
}
