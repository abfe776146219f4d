package join

import (
	"net"
	"sync"
)

// Port is the join listener's address for the life of the process. On
// several agents (docs/ha.md) only the leader serves joins, and the others
// must neither take them nor leave the port for another process to take
// between two terms: a Port is bound once, listens only while it is open
// (Open, for one term of leadership), and in between refuses every
// connection at once, as a port with nothing on it does, so a node daemon's
// dial moves on to the next agent's address without waiting.
//
// Where the system cannot keep a socket bound without listening (only
// Linux can here), the port is bound again for each term, as a plain
// listener is.
type Port struct {
	addr net.Addr
	held heldSocket
}

// BindPort binds address for the life of the process, listening on
// nothing yet. A port taken fails here, at the start, not at the first
// term.
func BindPort(address string) (*Port, error) {
	ln, err := net.Listen("tcp", address)
	if err != nil {
		return nil, err
	}
	if _, port, _ := net.SplitHostPort(address); port == "" || port == "0" {
		// A port the system chose is its to take back when the socket stops
		// listening; bound by its number, it stays the port's.
		chosen := ln.Addr().String()
		_ = ln.Close()
		if ln, err = net.Listen("tcp", chosen); err != nil {
			return nil, err
		}
	}
	p := &Port{addr: ln.Addr()}
	if p.held, err = holdSocket(ln); err != nil {
		_ = ln.Close()
		return nil, err
	}
	return p, nil
}

// Addr is the address the port is bound to (its real port when the
// configured one was 0).
func (p *Port) Addr() net.Addr { return p.addr }

// Open starts listening, for one term; closing the listener it returns
// stops listening and keeps the port bound. One term at a time: the
// listener of the last Open must be closed before the next.
func (p *Port) Open() (net.Listener, error) {
	ln, err := p.held.listen(p.addr)
	if err != nil {
		return nil, err
	}
	return &termListener{Listener: ln, stop: p.held.stopListening}, nil
}

// Close gives the port up, at the end of the process.
func (p *Port) Close() error { return p.held.close() }

// termListener is one term's listener on a Port: its Close stops listening
// (once, however many times it is called: net/http closes it, and so does
// its owner) and leaves the port bound.
type termListener struct {
	net.Listener
	stop func() error
	once sync.Once
	err  error
}

func (l *termListener) Close() error {
	l.once.Do(func() {
		l.err = l.Listener.Close()
		if err := l.stop(); l.err == nil {
			l.err = err
		}
	})
	return l.err
}
