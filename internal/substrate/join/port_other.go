//go:build !linux

package join

import "net"

// heldSocket holds nothing where a socket cannot stay bound without
// listening: each term binds the port again, and between terms it is free.
type heldSocket struct{}

func holdSocket(ln net.Listener) (heldSocket, error) { return heldSocket{}, ln.Close() }

func (heldSocket) listen(addr net.Addr) (net.Listener, error) {
	return net.Listen("tcp", addr.String())
}

func (heldSocket) stopListening() error { return nil }

func (heldSocket) close() error { return nil }
