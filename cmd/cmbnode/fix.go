package main

import (
	"errors"
	"fmt"

	"github.com/cmbnode/cmbnode/node/daemon"
	"github.com/cmbnode/cmbnode/node/ipc"
	"github.com/cmbnode/cmbnode/store"
)

// withFix adds to an error from starting the daemon what the person can do
// about it, in the CLI's terms: the store and the socket say only what
// they found.
func withFix(err error) error {
	var running *daemon.RunningError
	var inUse *ipc.InUseError
	var format *store.FormatError
	var long *ipc.SocketPathTooLongError
	switch {
	case err == nil:
		return err
	case errors.As(err, &running):
		return fmt.Errorf("%w; stop it, or start this one with another --home", err)
	case errors.As(err, &inUse):
		return fmt.Errorf("%w; stop it or use another --home", err)
	case errors.As(err, &format) && format.Older:
		return fmt.Errorf("%w; move the store aside and let the node catch up from its peers", err)
	case errors.As(err, &format):
		return fmt.Errorf("%w; it was not written by this version of cmbnode: run one that reads it, or move the store aside", err)
	case errors.As(err, &long):
		return fmt.Errorf("%w; use a shorter --home", err)
	case errors.Is(err, store.ErrLocked):
		return fmt.Errorf("%w; a cmbnode daemon may already be running with this home: stop it or use another --home", err)
	case errors.Is(err, store.ErrPermission):
		return fmt.Errorf("%w; check the directory's owner and mode", err)
	case errors.Is(err, store.ErrCorrupted):
		return fmt.Errorf("%w; restore from a peer or move the directory aside", err)
	}
	return err
}
