//go:build !linux

package ipc

import "net"

// peerPID is only known on Linux (SO_PEERCRED).
func peerPID(net.Conn) int { return 0 }
