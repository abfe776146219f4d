package localapi

import (
	"context"
	"net"
	"net/http"
	"os"
	"os/user"
	"runtime"
	"strconv"
	"syscall"
	"time"

	"github.com/fleet-agent/fleet-agent/internal/refusal"
)

// Peer is who is at the other end of a connection to the local API, as the
// kernel says (SO_PEERCRED on the unix socket): the identity the audit log
// records for an apply by hand or an edit. What a client writes in its
// request (the by and who fields older command lines send) is never
// trusted: anyone who may open the socket could write any name there.
type Peer struct {
	UID, GID, PID int
	// User is the user name of UID, when the system resolves it.
	User string
}

// Who is the peer as the audit log names it: USER@HOST (uid N), or
// uid N@HOST when the uid has no name. HOST is the agent's host: a unix
// socket's peer runs on it.
func (p Peer) Who() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "localhost"
	}
	uid := strconv.Itoa(p.UID)
	if p.User == "" {
		return "uid " + uid + "@" + host
	}
	return p.User + "@" + host + " (uid " + uid + ")"
}

type peerKey struct{}

// peerConnContext is the socket server's ConnContext: it reads the peer's
// credentials once per connection, when the connection is accepted, and
// puts them in the context every request on that connection sees. A
// connection whose credentials cannot be read carries none, and what it
// asks to audit is refused.
func peerConnContext(ctx context.Context, c net.Conn) context.Context {
	if p, ok := PeerOfConn(c); ok {
		return context.WithValue(ctx, peerKey{}, p)
	}
	return ctx
}

// PeerOfConn reads the credentials of a unix socket connection's peer.
func PeerOfConn(c net.Conn) (Peer, bool) {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return Peer{}, false
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return Peer{}, false
	}
	var cred *syscall.Ucred
	var credErr error
	if err := raw.Control(func(fd uintptr) {
		cred, credErr = syscall.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED)
	}); err != nil || credErr != nil || cred == nil {
		return Peer{}, false
	}
	p := Peer{UID: int(cred.Uid), GID: int(cred.Gid), PID: int(cred.Pid)}
	if u, err := user.LookupId(strconv.Itoa(p.UID)); err == nil {
		p.User = u.Username
	}
	return p, true
}

// PeerOf is the peer of a request to the local API.
func PeerOf(ctx context.Context) (Peer, bool) {
	p, ok := ctx.Value(peerKey{}).(Peer)
	return p, ok
}

// auditedWho is the name an audited request is recorded under: its peer's
// credentials, or a refusal when the connection has none (the local API
// served anywhere but its unix socket).
func auditedWho(r *http.Request) (string, error) {
	p, ok := PeerOf(r.Context())
	if !ok {
		return "", refusal.New(refusal.InvalidState,
			"the local API records who applies or edits from the socket's peer credentials, and this connection has none: use the agent's unix socket (the config's socket)")
	}
	return p.Who(), nil
}

// SocketLimits bound the time a client of the socket may take: its header
// (ReadHeader) and whole request (Read) are read within their limits, so a
// client sending a byte at a time loses its connection; the work a request
// asks for ends at Handler (its context's deadline); its answer must be
// written by Write, counted from the end of its header, so the answer of
// work that used all its time still goes out; an idle keep-alive is closed
// after Idle. net/http clears the read deadline once a request is read, so
// work longer than Read is not cut.
type SocketLimits struct {
	ReadHeader, Read, Handler, Write, Idle time.Duration
}

// DefaultSocketLimits size the socket for its longest request: an apply by
// hand, which the command line gives 5 minutes when it applies alone (the
// doctor through the agent fits as well: 20 s per probe). A request body of
// at most 32 MiB from a local process is read in well under a minute.
var DefaultSocketLimits = SocketLimits{ReadHeader: 10 * time.Second, Read: time.Minute, Handler: 5 * time.Minute, Write: 6 * time.Minute, Idle: time.Minute}

// SocketServer serves the local API on its unix socket with the default limits.
func SocketServer(h http.Handler) *http.Server { return SocketServerWith(h, DefaultSocketLimits) }

// SocketServerWith serves the local API on its unix socket: every connection
// carries its peer's credentials, every request the deadline lim.Handler,
// a header is at most 64 KiB, and net/http's own OPTIONS * answer is off.
func SocketServerWith(h http.Handler, lim SocketLimits) *http.Server {
	// One large request at a time: decoding a request of up to 32 MiB
	// (a 16 MiB document as base64) costs about twice its size, so
	// several at once could take the agent past its memory limit; the
	// others wait their turn within their deadline. Small requests (an
	// apply by hand, a plan of a commit) never wait.
	large := make(chan struct{}, 1)
	bounded := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), lim.Handler)
		defer cancel()
		if r.ContentLength < 0 {
			// The command line always says its length; a body of unknown
			// length would be read to the limit before it could be refused.
			w.Header().Set("Connection", "close")
			WriteJSON(w, http.StatusLengthRequired, apiError{Code: refusal.InvalidInput, Message: "bad request: the local API reads only bodies whose length is given (Content-Length)"})
			return
		}
		if r.ContentLength > largeRequest && r.ContentLength <= maxRequest {
			select {
			case large <- struct{}{}:
				// Its buffers are garbage once it is answered: collected
				// before the next large request's turn, the peak stays at
				// one request's cost rather than the collector's target
				// of twice that.
				defer func() { runtime.GC(); <-large }()
			case <-ctx.Done():
				WriteError(w, refusal.New(refusal.Unavailable, "the agent was busy with other large requests for %v; try again", lim.Handler))
				return
			}
		}
		h.ServeHTTP(w, r.WithContext(ctx))
	})
	return &http.Server{Handler: bounded, ConnContext: peerConnContext,
		ReadHeaderTimeout: lim.ReadHeader, ReadTimeout: lim.Read, WriteTimeout: lim.Write, IdleTimeout: lim.Idle,
		MaxHeaderBytes: 64 << 10, DisableGeneralOptionsHandler: true}
}

// largeRequest is the size over which a request to the socket waits for
// the one large request's turn.
const largeRequest = 1 << 20
