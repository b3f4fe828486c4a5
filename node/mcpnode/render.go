package mcpnode

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/cmbnode/cmbnode/cmb"
	"github.com/cmbnode/cmbnode/node"
)

// Memory is one memory as the tools return it.
type Memory struct {
	Key        string   `json:"key" jsonschema:"the memory's content address (cmb1-…); get, thread and parents take it or a unique prefix"`
	Author     string   `json:"author" jsonschema:"the author's nodeId"`
	AuthorName string   `json:"authorName,omitempty" jsonschema:"the name the author goes by in the group, when known"`
	Time       string   `json:"time" jsonschema:"when the author created it, RFC 3339 UTC"`
	Group      string   `json:"group" jsonschema:"the mesh group it belongs to"`
	Fields     Fields   `json:"fields" jsonschema:"the seven fields; an unfilled field reads neutral"`
	Parents    []string `json:"parents,omitempty" jsonschema:"keys of the memories this one builds on"`
	Score      *float64 `json:"score,omitempty" jsonschema:"recall only: relevance blended with recency, higher is better"`
}

// Fields is a memory's seven fields in spec order (cmb.FieldNames), every
// one present, as the daemon sends them (node.FieldsView). A struct rather
// than node.FieldsJSON's map: the output schema names each field, and a
// recall's ten memories decode and encode without seventy map entries and
// a sort of each map's keys.
type Fields struct {
	Focus       node.FieldJSON `json:"focus" jsonschema:"what it is about"`
	Issue       node.FieldJSON `json:"issue" jsonschema:"the problem or question at stake"`
	Intent      node.FieldJSON `json:"intent" jsonschema:"what is meant to happen"`
	Motivation  node.FieldJSON `json:"motivation" jsonschema:"why it matters"`
	Commitment  node.FieldJSON `json:"commitment" jsonschema:"what was promised or decided"`
	Perspective node.FieldJSON `json:"perspective" jsonschema:"whose point of view, or from where"`
	Mood        node.FieldJSON `json:"mood" jsonschema:"the author's mood; valence and arousal in [-1, 1] when given"`
}

// all lists the fields in spec order, each beside its name in cmb.FieldNames.
func (f *Fields) all() [cmb.NumFields]*node.FieldJSON {
	return [cmb.NumFields]*node.FieldJSON{&f.Focus, &f.Issue, &f.Intent, &f.Motivation, &f.Commitment, &f.Perspective, &f.Mood}
}

// fieldsOf is the fields of a node.FieldsJSON; one it lacks is neutral.
func fieldsOf(m node.FieldsJSON) Fields {
	var f Fields
	for i, p := range f.all() {
		v, ok := m[cmb.FieldNames[i]]
		if !ok {
			v = node.FieldJSON{Text: cmb.Neutral}
		}
		*p = v
	}
	return f
}

func fieldsOfRecord(r *cmb.Fields) Fields {
	var f Fields
	for i, p := range f.all() {
		*p = node.FieldJSON{Text: r[i].Text, Valence: r[i].Valence, Arousal: r[i].Arousal}
	}
	return f
}

func formatTime(ms int64) string { return time.UnixMilli(ms).UTC().Format(time.RFC3339) }

func memoryOf(m node.Memory, names map[string]string) Memory {
	return Memory{Key: m.Key, Author: m.CreatedBy, AuthorName: names[m.CreatedBy], Time: formatTime(m.CreatedAt),
		Group: m.Group, Fields: fieldsOf(m.Fields), Parents: m.Parents}
}

func memoryOfRecord(r *cmb.Record, names map[string]string) Memory {
	return Memory{Key: r.Key, Author: r.CreatedBy, AuthorName: names[r.CreatedBy], Time: formatTime(r.CreatedAt),
		Group: r.Group, Fields: fieldsOfRecord(&r.Fields), Parents: r.Parents()}
}

// who names an author for a reader: the name, else a short nodeId.
func who(m *Memory) string {
	if m.AuthorName != "" {
		return m.AuthorName
	}
	return cmb.Truncate(m.Author, 13)
}

// writeMemory renders one memory in a few lines a model reads well: a head
// line with key, author and time, then the fields that say something
// (neutral ones are left out).
func writeMemory(b *strings.Builder, indent string, m *Memory) {
	// Written piece by piece rather than with fmt: a recall renders ten
	// memories of seven fields on every call.
	b.WriteString(m.Key)
	b.WriteString(" · ")
	b.WriteString(who(m))
	b.WriteString(" · ")
	b.WriteString(m.Time)
	if m.Score != nil {
		b.WriteString(" · score ")
		var num [32]byte
		b.Write(strconv.AppendFloat(num[:0], *m.Score, 'f', 3, 64)) // %.3f
	}
	b.WriteByte('\n')
	for i, f := range m.Fields.all() {
		if f.Text == cmb.Neutral || f.Text == "" {
			continue
		}
		name := cmb.FieldNames[i]
		b.WriteString(indent)
		b.WriteString(name)
		b.WriteString(": ")
		b.WriteString(oneLine(f.Text, 400))
		if f.Valence != nil || f.Arousal != nil {
			var num [40]byte
			line := append(num[:0], " ("...)
			if f.Valence != nil {
				line = appendSigned(append(line, "valence "...), *f.Valence)
			}
			if f.Arousal != nil {
				if f.Valence != nil {
					line = append(line, ", "...)
				}
				line = appendSigned(append(line, "arousal "...), *f.Arousal)
			}
			b.Write(append(line, ')'))
		}
		b.WriteByte('\n')
	}
	if len(m.Parents) > 0 {
		b.WriteString(indent)
		b.WriteString("builds on: ")
		for i, p := range m.Parents {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString(p)
		}
		b.WriteByte('\n')
	}
}

// appendSigned appends v as fmt's %+.2f writes it: always a sign.
func appendSigned(b []byte, v float64) []byte {
	// fmt signs every NaN +; strconv writes +Inf's sign itself.
	if math.IsNaN(v) || (!math.Signbit(v) && !math.IsInf(v, 1)) {
		b = append(b, '+')
	}
	return strconv.AppendFloat(b, v, 'f', 2, 64)
}

// renderedSize is about how many bytes writeMemory writes for m, so that a
// list's builder is allocated once instead of doubling its way up.
func renderedSize(m *Memory) int {
	n := len(m.Key) + len(m.AuthorName) + len(m.Time) + 48
	for _, f := range m.Fields.all() {
		n += len(f.Text) + 40
	}
	for _, p := range m.Parents {
		n += len(p) + 2
	}
	return n
}

// oneLine folds whitespace and cuts text to at most n characters: the text
// rendering is a digest, the structured content carries the whole text.
func oneLine(s string, n int) string {
	if folded(s) && utf8.RuneCountInString(s) <= n {
		return s // the common case, without the copies below
	}
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > n {
		return string(r[:n]) + "…"
	}
	return s
}

// folded reports whether strings.Join(strings.Fields(s), " ") is s: no
// white space but single spaces between words.
func folded(s string) bool {
	space := true // at the start, a space would be leading
	for _, r := range s {
		if r == ' ' {
			if space {
				return false
			}
			space = true
			continue
		}
		if r < utf8.RuneSelf {
			if asciiSpace(byte(r)) {
				return false
			}
		} else if unicode.IsSpace(r) {
			return false
		}
		space = false
	}
	return !space || s == ""
}

func asciiSpace(c byte) bool { return c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r' }

func renderList(head string, ms []Memory) string {
	var b strings.Builder
	n := len(head) + 1
	for i := range ms {
		n += renderedSize(&ms[i])
	}
	b.Grow(n)
	b.WriteString(head)
	b.WriteByte('\n')
	for i := range ms {
		b.WriteString(strconv.Itoa(i + 1))
		b.WriteString(". ")
		writeMemory(&b, "   ", &ms[i])
	}
	return b.String()
}

// plural counts n things: "1 memory", "2 memories", "0 peers".
func plural(n int, one string) string {
	if n == 1 {
		return "1 " + one
	}
	if many, ok := strings.CutSuffix(one, "y"); ok {
		return fmt.Sprintf("%d %sies", n, many)
	}
	return fmt.Sprintf("%d %ss", n, one)
}
