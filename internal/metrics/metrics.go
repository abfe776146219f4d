// Package metrics is the agent's Prometheus instrumentation: counters of
// polls, fetches, plans, applies and posts, the outbox depth, drift as a
// gauge, last-success timestamps, durations as histograms, and the
// substrates (their states, their Nodes, the journal's operations and the
// discovery sweep's decisions), all named fleet_agent_*.
package metrics

import (
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Metrics implements agent.Metrics on a private registry.
type Metrics struct {
	reg         *prometheus.Registry
	polls       *prometheus.CounterVec
	fetches     prometheus.Counter
	plans       *prometheus.CounterVec
	applies     *prometheus.CounterVec
	forgeErrors prometheus.Counter
	drift       prometheus.Gauge
	driftChecks *prometheus.CounterVec
	lastSuccess *prometheus.GaugeVec
	durations   *prometheus.HistogramVec
	now         func() time.Time

	substrates     *prometheus.GaugeVec
	substrateNodes *prometheus.GaugeVec
	journalOps     *prometheus.CounterVec
	sweep          *prometheus.CounterVec
	passErrors     *prometheus.CounterVec
	exposed        *prometheus.GaugeVec
	etcdRequests   *prometheus.HistogramVec

	// registered is every collector on reg, in order: the registry cannot
	// list them, and Describe must (docs/metrics.md is made from it).
	registered []prometheus.Collector
}

// Outbox is what the outbox reports, read at scrape time.
type Outbox struct {
	Depth func() int
	// Posts returns the posts delivered and dropped, and the failed sends,
	// since the agent started.
	Posts func() (delivered, dropped, failed uint64)
	// Drops calls fn with the posts dropped for good since the agent
	// started, by kind (status, sticky, once) and reason (the forge's
	// class word); outbox.(*Outbox).EachDrop has this shape. Optional.
	Drops func(fn func(kind, reason string, n uint64))
}

// dropsCollector serves fleet_agent_posts_dropped_total{kind,reason} from the
// outbox's counts at scrape time.
type dropsCollector struct {
	desc  *prometheus.Desc
	drops func(fn func(kind, reason string, n uint64))
}

func (c dropsCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c dropsCollector) Collect(ch chan<- prometheus.Metric) {
	c.drops(func(kind, reason string, n uint64) {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.CounterValue, float64(n), kind, reason)
	})
}

// New registers the metrics; box is nil without GitHub.
func New(box *Outbox) *Metrics {
	m := &Metrics{reg: prometheus.NewRegistry(), now: time.Now}
	f := func(name, help string, labels ...string) *prometheus.CounterVec {
		c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "fleet_agent_" + name, Help: help}, labels)
		m.register(c)
		return c
	}
	m.polls = f("polls_total", "Polls of the git remote, by result.", "result")
	m.plans = f("plans_total", "Plans made (proposals, tips, drift), by result.", "result")
	m.applies = f("applies_total", "Outcomes of applies, by trigger (tip, hand, heal) and result (applied, refused, failed).", "trigger", "result")
	m.driftChecks = f("drift_checks_total", "Drift checks, by result (clean, drifted, error).", "result")
	m.fetches = prometheus.NewCounter(prometheus.CounterOpts{Name: "fleet_agent_fetches_total", Help: "Polls that fetched objects from the remote."})
	m.forgeErrors = prometheus.NewCounter(prometheus.CounterOpts{Name: "fleet_agent_forge_errors_total", Help: "Failed GitHub reads (pull request lists, merged pull request lookups)."})
	m.drift = prometheus.NewGauge(prometheus.GaugeOpts{Name: "fleet_agent_drift", Help: "1 while the fleet has drifted from the applied document."})
	m.lastSuccess = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "fleet_agent_last_success_timestamp_seconds", Help: "Unix time of the last success, by operation."}, []string{"op"})
	m.durations = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "fleet_agent_duration_seconds", Help: "Durations of polls, plans and applies.",
		Buckets: []float64{0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300}}, []string{"op"})
	m.journalOps = f("substrate_journal_operations_total", "Transitions of the substrate journal's provider operations, by step and result (sent, accepted, verifying, retried, deferred, succeeded, failed, abandoned).", "step", "result")
	m.sweep = f("substrate_sweep_decisions_total", "Decisions of the substrate discovery sweep (adopted, orphan, reported, foreign, ghost, nodePoolOrphan, nodePoolGhost, moved, error); foreign also counts a pass leaving another installation's cluster alone.", "decision")
	m.passErrors = f("substrate_pass_errors_total", "Substrate passes that failed before they finished (a state file error, a damaged record), by pool; each is also the substrate's status message.", "pool")
	m.substrates = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "fleet_agent_substrates", Help: "Substrates by state."}, []string{"state"})
	m.substrateNodes = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "fleet_agent_substrate_nodes", Help: "A substrate's Kubernetes Nodes, joined (true) or waiting to join (false)."}, []string{"pool", "joined"})
	m.exposed = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "fleet_agent_exposed_listener",
		Help: "1 for a listener without TLS or authentication that serves on an address other than loopback by an explicit opt-in (exposeOps, exposeInsecureJoin), by listener (ops, join)."}, []string{"listener"})
	m.etcdRequests = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "fleet_agent_etcd_request_duration_seconds",
		Help:    "Requests to etcd (state.backend: etcd), by result (ok, error): reads, commits and the election's.",
		Buckets: []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5}}, []string{"result"})
	m.register(m.substrates, m.substrateNodes, m.exposed)
	m.register(m.fetches, m.forgeErrors, m.drift, m.lastSuccess, m.durations,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if box != nil {
		m.register(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "fleet_agent_outbox_depth", Help: "Posts waiting in the outbox."},
			func() float64 { return float64(box.Depth()) }))
		for _, r := range []struct {
			result string
			pick   func(d, x, f uint64) uint64
		}{
			{"delivered", func(d, _, _ uint64) uint64 { return d }},
			{"dropped", func(_, x, _ uint64) uint64 { return x }},
			{"failed", func(_, _, f uint64) uint64 { return f }},
		} {
			m.register(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "fleet_agent_posts_total",
				Help: "Posts to GitHub: delivered, dropped (refused for good) and failed sends (each retry counts).", ConstLabels: prometheus.Labels{"result": r.result}},
				func() float64 { d, x, f := box.Posts(); return float64(r.pick(d, x, f)) }))
		}
		if box.Drops != nil {
			m.register(dropsCollector{drops: box.Drops, desc: prometheus.NewDesc("fleet_agent_posts_dropped_total",
				"Posts to GitHub dropped for good, by kind (status, sticky, once) and reason (validation, content_limited, not_found, ...); each is also an error log line, and a dropped comment a status on its commit.",
				[]string{"kind", "reason"}, nil)})
		}
	}
	return m
}

// Leadership is what an agent on an etcd store reports of its election.
type Leadership struct {
	Leading       func() bool
	Transitions   func() uint64
	FencedRefused func() uint64
	// RollForwardsLeft counts large commits that landed but whose
	// copying into place stopped, left to the next write or leader.
	RollForwardsLeft func() uint64
}

// WithLeadership registers the leadership's metrics and the etcd request
// histogram; an agent on a bbolt file has neither.
func (m *Metrics) WithLeadership(l Leadership) {
	m.register(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "fleet_agent_leader", Help: "1 while this agent leads (state.backend: etcd); a standby serves reads only."},
			func() float64 {
				if l.Leading() {
					return 1
				}
				return 0
			}),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "fleet_agent_leader_transitions_total", Help: "Times this agent took or lost the leadership."},
			func() float64 { return float64(l.Transitions()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "fleet_agent_fenced_refused_total",
			Help: "Writes, provider calls and posts refused because this agent did not lead (or had lost its lease) when it tried."},
			func() float64 { return float64(l.FencedRefused()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "fleet_agent_etcd_rollforwards_left_total",
			Help: "Large commits that landed (readers see them whole) but whose copying into place stopped; the leader's next write or the next leader finishes each. The log says why."},
			func() float64 { return float64(l.RollForwardsLeft()) }),
		m.etcdRequests)
}

// EtcdRequest records one request to etcd.
func (m *Metrics) EtcdRequest(took time.Duration, err error) {
	result := "ok"
	if err != nil {
		result = "error"
	}
	m.etcdRequests.WithLabelValues(result).Observe(took.Seconds())
}

func (m *Metrics) register(cs ...prometheus.Collector) {
	m.reg.MustRegister(cs...)
	m.registered = append(m.registered, cs...)
}

// Describe sends the descriptor of every metric registered, vectors that
// have no series yet included (a scrape shows only series): what
// docs/metrics.md must list.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range m.registered {
		c.Describe(ch)
	}
}

// Gatherer is the registry /metrics serves.
func (m *Metrics) Gatherer() prometheus.Gatherer { return m.reg }

// Handler serves /metrics.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg})
}

func result(err error) string {
	if err != nil {
		return "error"
	}
	return "ok"
}

func (m *Metrics) done(op string, err error, took time.Duration) {
	m.durations.WithLabelValues(op).Observe(took.Seconds())
	if err == nil {
		m.lastSuccess.WithLabelValues(op).Set(float64(m.now().UnixMilli()) / 1000)
	}
}

// Poll counts a poll.
func (m *Metrics) Poll(err error, took time.Duration, fetched bool) {
	m.polls.WithLabelValues(result(err)).Inc()
	if fetched {
		m.fetches.Inc()
	}
	m.done("poll", err, took)
}

// Plan counts a plan.
func (m *Metrics) Plan(err error, took time.Duration) {
	m.plans.WithLabelValues(result(err)).Inc()
	m.done("plan", err, took)
}

// Apply counts an outcome of an apply; only applies that ran are timed.
func (m *Metrics) Apply(trigger, result string, took time.Duration) {
	m.applies.WithLabelValues(trigger, result).Inc()
	if result == "applied" {
		m.done("apply", nil, took)
	} else if result == "failed" {
		m.durations.WithLabelValues("apply").Observe(took.Seconds())
	}
}

// ForgeError counts a failed GitHub read.
func (m *Metrics) ForgeError() { m.forgeErrors.Inc() }

// Drift records a drift check.
func (m *Metrics) Drift(drifted bool, err error) {
	switch {
	case err != nil:
		m.driftChecks.WithLabelValues("error").Inc()
		return
	case drifted:
		m.driftChecks.WithLabelValues("drifted").Inc()
		m.drift.Set(1)
	default:
		m.driftChecks.WithLabelValues("clean").Inc()
		m.drift.Set(0)
	}
	m.lastSuccess.WithLabelValues("drift").Set(float64(m.now().UnixMilli()) / 1000)
}

// JournalOp counts a transition of the substrate journal.
func (m *Metrics) JournalOp(step, result string) { m.journalOps.WithLabelValues(step, result).Inc() }

// PassFailed counts a substrate pass that failed before it finished.
func (m *Metrics) PassFailed(pool string) { m.passErrors.WithLabelValues(pool).Inc() }

// SweepDecision counts a decision of the discovery sweep.
func (m *Metrics) SweepDecision(decision string) { m.sweep.WithLabelValues(decision).Inc() }

// SubstrateStates sets the number of substrates in each state; states not
// given keep their last value, so the reconciler passes every state.
func (m *Metrics) SubstrateStates(byState map[string]int) {
	for st, n := range byState {
		m.substrates.WithLabelValues(st).Set(float64(n))
	}
}

// SubstrateNodes sets each pool's Nodes: joined (joined="true") and listed
// but not joined (joined="false"); pools not given (deleted substrates) are
// dropped.
func (m *Metrics) SubstrateNodes(listed, joined map[string]int) {
	m.substrateNodes.Reset()
	for pool, n := range listed {
		j := joined[pool]
		m.substrateNodes.WithLabelValues(pool, "true").Set(float64(j))
		m.substrateNodes.WithLabelValues(pool, "false").Set(float64(max(n-j, 0)))
	}
}

// Exposed records a listener that serves without TLS or authentication on
// an address other than loopback, by the config's opt-in.
func (m *Metrics) Exposed(listener string) { m.exposed.WithLabelValues(listener).Set(1) }
