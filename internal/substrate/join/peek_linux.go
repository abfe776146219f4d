package join

import (
	"errors"
	"net"
	"syscall"
)

// peek reports whether c's client has closed or reset it (gone), and
// whether bytes wait to be read (pending), by peeking at the socket without
// waiting and without taking a byte (the server's goroutine may be reading
// it at the same time: Control takes no read lock). A socket that cannot be
// peeked at counts as having bytes: only age frees its place.
func peek(c net.Conn) (gone, pending bool) {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return false, true
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return true, false
	}
	var buf [1]byte
	cerr := raw.Control(func(fd uintptr) {
		n, _, err := syscall.Recvfrom(int(fd), buf[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		switch {
		case err == nil:
			gone, pending = n == 0, n > 0 // n == 0: the client's FIN
		case errors.Is(err, syscall.EAGAIN):
		case errors.Is(err, syscall.EINTR):
			pending = true // not known: not idle
		default:
			gone = true // reset
		}
	})
	return gone || cerr != nil, pending
}
