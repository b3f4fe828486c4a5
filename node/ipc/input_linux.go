package ipc

import (
	"syscall"
	"unsafe"
)

// inputProbe asks a socket how many bytes wait to be read (FIONREAD). Its
// call is made once per connection, so that asking allocates nothing; only
// the connection's reader uses it.
type inputProbe struct {
	n     int32
	errno syscall.Errno
	call  func(fd uintptr)
}

// inputWaiting reports whether the client's socket holds bytes not yet
// read; true when that cannot be told.
func (c *conn) inputWaiting() bool {
	if c.rc == nil {
		return true
	}
	p := &c.probe
	if p.call == nil {
		p.call = func(fd uintptr) {
			_, _, p.errno = syscall.Syscall(syscall.SYS_IOCTL, fd, syscall.TIOCINQ, uintptr(unsafe.Pointer(&p.n)))
		}
	}
	p.n, p.errno = 0, 0
	if err := c.rc.Control(p.call); err != nil || p.errno != 0 {
		return true
	}
	return p.n > 0
}
