package join

import (
	"errors"
	"net"
	"syscall"
)

// peerGone reports whether c's client has closed or reset it, by peeking at
// the socket without waiting and without taking a byte (the server's
// goroutine may be reading it at the same time: Control takes no read
// lock). A socket with nothing to read yet is alive.
func peerGone(c net.Conn) bool {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return false
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return true
	}
	gone := false
	var buf [1]byte
	cerr := raw.Control(func(fd uintptr) {
		n, _, err := syscall.Recvfrom(int(fd), buf[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		switch {
		case err == nil:
			gone = n == 0 // the client's FIN
		case errors.Is(err, syscall.EAGAIN), errors.Is(err, syscall.EINTR):
		default:
			gone = true // reset
		}
	})
	return gone || cerr != nil
}
