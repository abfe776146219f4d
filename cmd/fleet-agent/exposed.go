package main

import (
	"fmt"
	"net"

	"github.com/fleet-agent/fleet-agent/internal/refusal"
)

// exposure is one listener's verdict at start-up: a listener without TLS or
// authentication serves on an address other than loopback only by an
// explicit opt-in, and then loudly (a warning line, a metric, a status
// warning); without the opt-in the agent refuses to start.
type exposure struct {
	listener string // "ops" or "join": the metric's label
	warning  string // the log line and the status warning
}

// exposedWhat describes, per listener, what anyone reaching it gets.
type exposedWhat struct {
	listener, key, optIn, what string
}

var (
	opsExposure = exposedWhat{listener: "ops", key: "listen", optIn: "exposeOps",
		what: "plain HTTP with no authentication: anyone who reaches it reads the metrics, the status and the page"}
	opsPprofExposure = exposedWhat{listener: "ops", key: "listen", optIn: "exposeOps",
		what: "plain HTTP with no authentication, with pprof on: anyone who reaches it reads the metrics, the status, the page and the process's memory profiles"}
	joinExposure = exposedWhat{listener: "join", key: "substrate.join.listen", optIn: "exposeInsecureJoin",
		what: "without TLS (substrate.join.insecure: true): join tokens and node keys cross the network in clear"}
)

// checkExposed checks where a listener bound to bound serves. Loopback
// serves only this host; an unspecified address (0.0.0.0, [::], or no host)
// or any other address serves the network.
func checkExposed(bound net.Addr, w exposedWhat, optedIn bool) (*exposure, error) {
	addr, ok := bound.(*net.TCPAddr)
	if !ok || addr.IP.IsLoopback() {
		return nil, nil
	}
	if !optedIn {
		return nil, refusal.New(refusal.InvalidInput,
			"the %s listener on %s (%s) is %s, on an address other than loopback: listen on 127.0.0.1 (behind a proxy that adds TLS and authentication), or set %s: true to serve it there anyway",
			w.listener, addr, w.key, w.what, w.optIn)
	}
	return &exposure{listener: w.listener,
		warning: fmt.Sprintf("the %s listener on %s is %s, on an address other than loopback (%s: true)", w.listener, addr, w.what, w.optIn)}, nil
}
