package cgpnode

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cmbnode/cmbnode/cmb"
	"github.com/cmbnode/cmbnode/node"
	"github.com/cmbnode/cmbnode/node/ipc"
)

// Issue #24: over stdio, a result larger than one socket message (1 MiB)
// failed with too_large. The daemon now packs it within the socket's
// budget, and the host gets the frames that fit with truncated:true and
// dropped_estimate counting the rest (CGP §7 budget honesty).
func TestStdioResultOverOneMiBIsTruncated(t *testing.T) {
	home := t.TempDir()
	sock := filepath.Join(home, "daemon.sock")
	n := openNode(t, home)
	defer n.Close()
	const records = 40 // 60 KiB each: 2.4 MB of frames
	for i := range records {
		var f cmb.Fields
		f[cmb.Focus].Text = fmt.Sprintf("large design note %d", i)
		f[cmb.Issue].Text = strings.Repeat(fmt.Sprintf("detail %02d ", i), 6<<10)
		if _, err := n.Remember(context.Background(), node.RememberInput{Fields: f}); err != nil {
			t.Fatal(err)
		}
	}
	stop := serve(t, n, sock)
	defer stop()

	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- ServeStdio(context.Background(), inR, outW, home, sock, "test", slog.New(slog.DiscardHandler))
		outW.Close()
	}()
	go func() {
		io.WriteString(inW, `{"type":"handshake","protocol_version":"contextgraph/1.0"}`+"\n")
		io.WriteString(inW, `{"type":"query","id":"big","query":{"goal":"large design note","kinds":["memory"],"max_frames":100,"max_tokens":10000000}}`+"\n")
		inW.Close()
	}()
	br := bufio.NewReaderSize(outR, 1<<20)
	var reply []byte
	for {
		line, err := br.ReadBytes('\n')
		if err != nil {
			t.Fatalf("no reply to the query: %v", err)
		}
		if strings.Contains(string(line), `"id":"big"`) {
			reply = line
			break
		}
	}
	var env struct {
		Type, Code, Message string
		Result              struct {
			Frames          []json.RawMessage `json:"frames"`
			Truncated       bool              `json:"truncated"`
			DroppedEstimate *int              `json:"dropped_estimate"`
		}
	}
	if err := json.Unmarshal(reply, &env); err != nil {
		t.Fatal(err)
	}
	if env.Type != "frames" {
		t.Fatalf("query over the socket's budget: %s %s: %s", env.Type, env.Code, env.Message)
	}
	got := len(env.Result.Frames)
	if got == 0 || got == records || !env.Result.Truncated || env.Result.DroppedEstimate == nil ||
		*env.Result.DroppedEstimate != records-got || len(reply) > ipc.MaxMessage {
		t.Fatalf("%d bytes, %d frames, truncated %v, dropped %v", len(reply), got, env.Result.Truncated, env.Result.DroppedEstimate)
	}
	if err := <-done; err != nil {
		t.Fatalf("shim: %v", err)
	}
}
