package cgptest

import (
	"encoding/json"
	"strings"
	"testing"
)

type jsonRaw = json.RawMessage

func mustUnmarshal(t *testing.T, b []byte, v any) {
	t.Helper()
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatal(err)
	}
}

// extractFrame finds the frame object inside a fixture file, which wraps
// it under a case name ("frame", "input", or the file's single member).
func extractFrame(t *testing.T, b []byte) json.RawMessage {
	t.Helper()
	var m map[string]json.RawMessage
	mustUnmarshal(t, b, &m)
	if _, ok := m["id"]; ok {
		return b
	}
	for _, k := range []string{"frame", "input", "source"} {
		if f, ok := m[k]; ok {
			return f
		}
	}
	for _, v := range m {
		var inner map[string]json.RawMessage
		if json.Unmarshal(v, &inner) == nil {
			if _, ok := inner["id"]; ok {
				return v
			}
			for _, k := range []string{"frame", "input", "source"} {
				if f, ok := inner[k]; ok {
					return f
				}
			}
		}
	}
	t.Fatalf("no frame in fixture: %.200s", b)
	return nil
}

func containsF3(p []string) bool {
	for _, s := range p {
		if strings.Contains(s, "F3") {
			return true
		}
	}
	return false
}
