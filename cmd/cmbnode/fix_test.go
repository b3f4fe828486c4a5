package main

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/cmbnode/cmbnode/node/daemon"
	"github.com/cmbnode/cmbnode/node/ipc"
	"github.com/cmbnode/cmbnode/store"
)

// TestWithFix: each start-up failure the store or the socket reports as
// facts gets its fix in the CLI's terms, and keeps what it wraps.
func TestWithFix(t *testing.T) {
	for _, c := range []struct {
		err  error
		want string
	}{
		{&store.FormatError{Dir: "/h/store", Found: "cmbnode-store-2", Want: "cmbnode-store-3", Older: true}, "let the node catch up from its peers"},
		{&store.FormatError{Dir: "/h/store", Found: "cmbnode-store-9", Want: "cmbnode-store-3"}, "run one that reads it"},
		{&ipc.SocketPathTooLongError{Path: "/long/cmbnode.sock", Len: 120, Max: 107}, "use a shorter --home"},
		{&store.LockedError{Dir: "/h/store", Home: "/h", Err: errors.New("Cannot acquire directory lock")}, "stop it or use another --home"},
		{fmt.Errorf("%w: /h/store (home /h): mkdir", store.ErrPermission), "owner and mode"},
		{fmt.Errorf("%w: opening /h/store: manifest has bad magic", store.ErrCorrupted), "restore from a peer or move the directory aside"},
		{&daemon.RunningError{Home: "/h", Socket: "/h/s", Err: &store.LockedError{}}, "start this one with another --home"},
		{&ipc.InUseError{Path: "/h/daemon.sock"}, "stop it or use another --home"},
	} {
		wrapped := fmt.Errorf("open node: %w", c.err)
		got := withFix(wrapped)
		if !errors.Is(got, c.err) || !strings.HasPrefix(got.Error(), wrapped.Error()+"; ") || !strings.Contains(got.Error(), c.want) {
			t.Errorf("withFix(%v) = %v, want it followed by %q", wrapped, got, c.want)
		}
	}
	// Other errors have no fix to add.
	for _, err := range []error{nil, errors.New("other")} {
		if got := withFix(err); got != err {
			t.Errorf("withFix(%v) = %v, want it unchanged", err, got)
		}
	}
}
