package cgp_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/cmbnode/cmbnode/node/cgp"
)

// CGP replies carry string ids; a numeric id is refused in words, never
// silently answered without its id (which a host could not match).
func TestNumericIDIsRefusedClearly(t *testing.T) {
	s := cgp.NewSession(nil, nil)
	for _, line := range []string{
		`{"type":"query","id":7,"query":{"goal":"x","max_frames":1,"max_tokens":10}}`,
		`{"type":"verify","id":{"a":1},"request":{"frames":[]}}`,
	} {
		reply, _ := s.HandleLine(context.Background(), []byte(line))
		var e struct{ Type, Code, Message string }
		if err := json.Unmarshal(reply, &e); err != nil || e.Type != "error" || e.Code != cgp.CodeBadRequest || !strings.Contains(e.Message, "id must be a JSON string") {
			t.Errorf("%s: got %s", line, reply)
		}
	}
}
