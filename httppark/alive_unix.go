//go:build unix

package httppark

import (
	"net"
	"syscall"
)

// alive peeks at one byte without waiting: EOF (the client closed) or an error such as a
// reset means the client is gone; nothing to read yet, or a byte of a next request, means
// it still waits.
func alive(c net.Conn) bool {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return true
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	there := true
	var b [1]byte
	err = raw.Read(func(fd uintptr) bool {
		n, _, rerr := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		switch {
		case rerr == syscall.EAGAIN || rerr == syscall.EWOULDBLOCK || rerr == syscall.EINTR:
			there = true
		case rerr != nil:
			there = false
		default:
			there = n > 0
		}
		return true // never wait for the connection to become readable
	})
	return there && err == nil
}
