package daemon

import (
	"context"
	"crypto/ed25519"
	"errors"
	"strings"

	"github.com/cmbnode/cmbnode/node"
	"github.com/cmbnode/cmbnode/node/ipc"
	"github.com/cmbnode/cmbnode/store"
)

// TrustOffline pins key for nodeID as the operator's choice (confirmed and
// trusted, as `cmbnode trust` does through a daemon) in the store of a home
// no daemon serves, creating the store if the home has none yet: `cmbnode
// join` pins the inviter this way before the first connection. It refuses
// with a *RunningError when a daemon holds the store.
func TrustOffline(ctx context.Context, home, nodeID string, key ed25519.PublicKey) error {
	sock := SocketPath(home)
	if alive, pid := ipc.Probe(sock); alive {
		return &RunningError{Home: home, Socket: sock, PID: pid}
	}
	dir := node.StoreDir(home)
	st, err := store.Open(dir, store.Options{Home: home})
	if errors.Is(err, store.ErrLocked) {
		return &RunningError{Home: home, Socket: sock, PID: lockHolder(dir), Err: err}
	}
	if err != nil {
		return err
	}
	_, _, err = st.TrustPeer(ctx, store.Peer{NodeID: strings.ToLower(nodeID), Ed25519: key})
	if cerr := st.Close(); err == nil {
		err = cerr
	}
	return err
}
