package ipc

import (
	"bufio"
	"net"
	"path/filepath"
	"testing"
)

func TestResultID(t *testing.T) {
	for in, want := range map[string]string{
		`{"type":"result","action":"recall","id":"17","results":[]}`: "17",
		`{"type":"result","action":"status","id":"3"}`:               "3",
	} {
		if got, ok := resultID([]byte(in)); !ok || got != want {
			t.Errorf("resultID(%s) = %q, %v; want %q", in, got, ok, want)
		}
	}
	// Shapes the full decode must handle (or refuse).
	for _, in := range []string{
		`{"type":"error","action":"recall","id":"1","code":"x","message":"y"}`,
		`{"type":"event","event":"cmb-accepted","data":{}}`,
		`{"action":"recall","type":"result","id":"1"}`,
		`{"type":"result","action":"re\"call","id":"1"}`,
		`{"type":"result","action":"recall","id":"1\u0032"}`,
		`{"type":"result","action":"recall","id":1}`,
		`{"type":"result","action":"recall"}`,
		`{"type":"result","action":"recall`,
		``,
	} {
		if id, ok := resultID([]byte(in)); ok {
			t.Errorf("resultID(%s) = %q: want the full decode", in, id)
		}
	}
}

// A result whose head reads well but whose body is not JSON is an error,
// for the typed calls and for Call alike, never bytes passed on.
func TestMalformedResultBodyRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "d.sock")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		nc, err := ln.Accept()
		if err != nil {
			return
		}
		defer nc.Close()
		br := bufio.NewReader(nc)
		for i := 1; ; i++ {
			if _, err := br.ReadBytes('\n'); err != nil {
				return
			}
			nc.Write([]byte(`{"type":"result","action":"x","id":"` + string(rune('0'+i)) + `","results":[{"key":` + "\n"))
		}
	}()
	c := dialClient(t, path)
	ctx := ctxT(t)
	if _, err := c.Recall(ctx, "q", 1); err == nil {
		t.Fatal("Recall accepted a malformed reply")
	}
	if raw, err := c.Call(ctx, "status", nil); err == nil {
		t.Fatalf("Call passed on a malformed reply: %s", raw)
	}
	if err := c.call(ctx, "forget", nil, nil); err == nil {
		t.Fatal("call without a result accepted a malformed reply")
	}
}
