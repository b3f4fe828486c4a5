package main

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/cmbnode/cmbnode/node/ipc"
)

// cmdConnect dials a peer at runtime, like `ipfs swarm connect`: it
// returns once the peer passed the handshake and membership proof, or
// says which step failed.
func cmdConnect(e *env, args []string) error {
	fs := newFlags(e, "connect", "connect MADDR [--home DIR] [--json]")
	home, asJSON := clientFlags(fs)
	rest, err := e.parse(fs, args)
	if err != nil {
		return err
	}
	if len(rest) != 1 {
		return usagef("give one address: a multiaddr ending in /p2p/<peerId>, as `cmbnode status` on the other node shows it")
	}
	s, done, err := connect(e, *home)
	if err != nil {
		return err
	}
	defer done()
	raw, err := s.c.Call(s.ctx, ipc.TypeConnect, map[string]any{"addr": rest[0]})
	if err != nil {
		var ie *ipc.Error
		if errors.As(err, &ie) {
			switch ie.Code {
			case ipc.CodeBadRequest:
				return usagef("%s", ie.Message)
			case ipc.CodeUnavailable:
				return fmt.Errorf("could not reach the peer: %s", ie.Message)
			case ipc.CodeRejected:
				return fmt.Errorf("reached the peer, but it was not admitted: %s", ie.Message)
			}
		}
		return daemonErr(err)
	}
	if *asJSON {
		return printPayload(e.stdout, raw)
	}
	var r struct {
		Peer struct {
			NodeID string `json:"nodeId"`
			Name   string `json:"name"`
			PeerID string `json:"peerId"`
			Conn   string `json:"conn"`
		} `json:"peer"`
	}
	if err := json.Unmarshal(raw, &r); err != nil {
		return fmt.Errorf("daemon sent an unreadable connect reply: %w", err)
	}
	fmt.Fprintf(e.stdout, "connected to %s (%s), peer %s, %s\n", r.Peer.NodeID, r.Peer.Name, r.Peer.PeerID, r.Peer.Conn)
	return nil
}
