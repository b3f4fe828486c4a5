//go:build !linux

package ipc

type inputProbe struct{}

// inputWaiting cannot ask the socket here: it says input may be waiting,
// so requests go to the workers.
func (c *conn) inputWaiting() bool { return true }
