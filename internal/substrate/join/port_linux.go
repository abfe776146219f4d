package join

import (
	"errors"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// heldSocket keeps the listening socket a Port was bound with, as a
// duplicate descriptor. Linux lets a listening socket stop listening and
// stay bound (shutdown for reading; a port chosen by its owner stays its
// own) and listen again later, so between terms the port is held and every
// connection to it is refused, with no listener behind the descriptor.
//
// SO_REUSEADDR is on only while it listens: a bound socket that does not
// listen, with the option on, would let another socket with it bind the
// same address; while it listens the option lets it listen again beside
// the TIME_WAIT of the connections it closed (the listener closes every
// connection after its answer).
type heldSocket struct {
	fd int
}

func holdSocket(ln net.Listener) (heldSocket, error) {
	tl, ok := ln.(*net.TCPListener)
	if !ok {
		return heldSocket{fd: -1}, errors.New("join: not a TCP listener")
	}
	rc, err := tl.SyscallConn()
	if err != nil {
		return heldSocket{fd: -1}, err
	}
	h := heldSocket{fd: -1}
	var dupErr error
	if err := rc.Control(func(fd uintptr) { h.fd, dupErr = dupCloexec(int(fd)) }); err != nil {
		return heldSocket{fd: -1}, err
	}
	if dupErr != nil {
		return heldSocket{fd: -1}, dupErr
	}
	// Not listening until a term opens it; net.Listen's own descriptor goes
	// with its listener.
	if err := h.stopListening(); err != nil {
		_ = h.close()
		return heldSocket{fd: -1}, err
	}
	if err := ln.Close(); err != nil {
		_ = h.close()
		return heldSocket{fd: -1}, err
	}
	return h, nil
}

// listen makes the held socket listen again and gives it to the runtime's
// poller as a listener of its own (a duplicate, closed with it).
func (h heldSocket) listen(net.Addr) (net.Listener, error) {
	if err := h.reuseAddr(true); err != nil {
		return nil, err
	}
	if err := syscall.Listen(h.fd, backlog()); err != nil {
		_ = h.reuseAddr(false)
		return nil, os.NewSyscallError("listen", err)
	}
	fd, err := dupCloexec(h.fd)
	if err != nil {
		_ = h.stopListening()
		return nil, err
	}
	f := os.NewFile(uintptr(fd), "join-listener")
	defer f.Close()
	ln, err := net.FileListener(f)
	if err != nil {
		_ = h.stopListening()
		return nil, err
	}
	return ln, nil
}

// stopListening drops the connections waiting to be accepted and refuses
// new ones, keeping the port.
func (h heldSocket) stopListening() error {
	err := syscall.Shutdown(h.fd, syscall.SHUT_RD)
	if errors.Is(err, syscall.ENOTCONN) {
		err = nil // not listening: nothing to stop
	}
	if err != nil {
		return os.NewSyscallError("shutdown", err)
	}
	return h.reuseAddr(false)
}

func (h heldSocket) reuseAddr(on bool) error {
	v := 0
	if on {
		v = 1
	}
	return os.NewSyscallError("setsockopt", syscall.SetsockoptInt(h.fd, syscall.SOL_SOCKET, syscall.SO_REUSEADDR, v))
}

func (h heldSocket) close() error {
	if h.fd < 0 {
		return nil
	}
	return syscall.Close(h.fd)
}

func dupCloexec(fd int) (int, error) {
	nfd, err := syscall.Dup(fd)
	if err != nil {
		return -1, os.NewSyscallError("dup", err)
	}
	syscall.CloseOnExec(nfd)
	return nfd, nil
}

// backlog is the kernel's limit on a listening socket's queue, the one
// net.Listen asks for.
func backlog() int {
	b, err := os.ReadFile("/proc/sys/net/core/somaxconn")
	if err == nil {
		if n, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && n > 0 {
			return min(n, 1<<16-1)
		}
	}
	return syscall.SOMAXCONN
}
