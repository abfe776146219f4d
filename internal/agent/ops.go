package agent

import (
	"github.com/fleet-agent/fleet-agent/internal/localapi"
	"github.com/fleet-agent/fleet-agent/internal/state"
	"net/http"
	"net/http/pprof"
	"time"
)

// OpsOptions say what the ops listener serves besides health and status.
type OpsOptions struct {
	Metrics http.Handler // /metrics
	Webhook http.Handler // POST /hooks/github; nil without a webhook secret
	Pprof   bool         // /debug/pprof/
	// UI is the page for people under /ui/ (internal/ui); nil serves none.
	// The agent does not build it: the page reads the agent, not the other
	// way round.
	UI http.Handler
}

// OpsHandler serves the ops listener: /healthz (alive), /readyz (the state
// is open and a poll succeeded within three intervals; a GitHub outage
// shows in metrics, not here), /status, /metrics, the page (/ui/), and the
// webhook.
func (a *Agent) OpsHandler(o OpsOptions) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		if err := a.store.View(func(*state.Tx) error { return nil }); err != nil {
			http.Error(w, "state not readable: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		last := a.LastPoll()
		if last.IsZero() || a.clock.Now().Sub(last) > 3*a.interval() {
			http.Error(w, "no successful poll within three intervals", http.StatusServiceUnavailable)
			return
		}
		w.Write([]byte("ready\n"))
	})
	mux.HandleFunc("GET /status", func(w http.ResponseWriter, r *http.Request) {
		v, err := a.status()
		if err != nil {
			localapi.WriteError(w, err)
			return
		}
		localapi.WriteJSON(w, http.StatusOK, v)
	})
	if o.Metrics != nil {
		mux.Handle("GET /metrics", o.Metrics)
	}
	if o.UI != nil {
		mux.Handle("/ui/", o.UI)
	}
	if o.Webhook != nil {
		mux.Handle("/hooks/github", o.Webhook)
	}
	if o.Pprof {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	return mux
}

func (a *Agent) interval() time.Duration {
	if a.cfg.Interval <= 0 {
		return time.Minute
	}
	return a.cfg.Interval
}
