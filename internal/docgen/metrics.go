package docgen

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/fleet-agent/fleet-agent/internal/metrics"
	"github.com/prometheus/client_golang/prometheus"
)

// Metric is one metric the agent serves, as docs/metrics.md lists it.
type Metric struct {
	Name, Type, Help string
	// Labels are the label names; a constant label carries its values.
	Labels []string
}

// ServedPrefixes are the metrics client_golang serves beside
// fleet_agent_*: the Go runtime's and the process's (their set depends on
// the Go version and the platform, so the page names the collectors rather
// than list each) and the handler's own errors.
var ServedPrefixes = []string{"go_", "process_", "promhttp_"}

// AgentMetrics builds the metrics as the agent does with GitHub configured
// (every optional part on), records one of everything so that each vector
// has a series to give its type, and lists the fleet_agent_* metrics by
// name from their descriptors: a metric registered but never recorded
// here is an error naming it, not a row missing from the page.
func AgentMetrics() ([]Metric, error) {
	m := NewServed()
	byName := map[string]*Metric{}
	var order []string
	ch := make(chan *prometheus.Desc)
	go func() { m.Describe(ch); close(ch) }()
	var errs []error
	for d := range ch {
		name, help, consts, vars, err := parseDesc(d)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if !strings.HasPrefix(name, "fleet_agent_") {
			continue
		}
		mt := byName[name]
		if mt == nil {
			mt = &Metric{Name: name, Help: help}
			byName[name] = mt
			order = append(order, name)
		}
		for _, v := range vars {
			if !slices.Contains(mt.Labels, v) {
				mt.Labels = append(mt.Labels, v)
			}
		}
		for k, v := range consts {
			mt.Labels = appendConst(mt.Labels, k, v)
		}
	}
	fams, err := m.Gatherer().Gather()
	if err != nil {
		return nil, fmt.Errorf("gathering the metrics: %w", err)
	}
	for _, f := range fams {
		if mt := byName[f.GetName()]; mt != nil {
			mt.Type = strings.ToLower(f.GetType().String())
		}
	}
	var out []Metric
	for _, n := range order {
		mt := byName[n]
		if mt.Type == "" {
			errs = append(errs, fmt.Errorf("metric %s has no series after docgen's exercise (internal/docgen/metrics.go): record one there so the page can give its type", n))
			continue
		}
		out = append(out, *mt)
	}
	slices.SortFunc(out, func(a, b Metric) int { return strings.Compare(a.Name, b.Name) })
	return out, errors.Join(errs...)
}

// NewServed returns the agent's metrics with every optional part on (the
// outbox with its drops, as with GitHub) and one of everything recorded.
func NewServed() *metrics.Metrics {
	m := metrics.New(&metrics.Outbox{
		Depth: func() int { return 1 },
		Posts: func() (uint64, uint64, uint64) { return 1, 1, 1 },
		Drops: func(fn func(kind, reason string, n uint64)) { fn("status", "validation", 1) },
	})
	m.Poll(nil, time.Millisecond, true)
	m.Plan(nil, time.Millisecond)
	m.Apply("tip", "applied", time.Millisecond)
	m.ForgeError()
	m.Drift(false, nil)
	m.JournalOp("create", "sent")
	m.SweepDecision("adopted")
	m.PassFailed("k8s")
	m.Exposed("ops")
	m.SubstrateStates(map[string]int{"ready": 1})
	m.SubstrateNodes(map[string]int{"k8s": 1}, map[string]int{"k8s": 1})
	m.WithLeadership(metrics.Leadership{Leading: func() bool { return true },
		Transitions: func() uint64 { return 1 }, FencedRefused: func() uint64 { return 0 }, RollForwardsLeft: func() uint64 { return 0 }})
	m.EtcdRequest(time.Millisecond, nil)
	return m
}

func appendConst(labels []string, k, v string) []string {
	for i, l := range labels {
		if name, vals, ok := strings.Cut(l, "="); ok && name == k {
			if !slices.Contains(strings.Split(vals, ","), v) {
				labels[i] += "," + v
			}
			return labels
		}
	}
	return append(labels, k+"="+v)
}

// descText is prometheus.Desc's String form, the only way its parts are
// exposed: Desc{fqName: "…", help: "…", constLabels: {k="v",…}, variableLabels: {a,b}}.
var (
	descText  = regexp.MustCompile(`^Desc\{fqName: ("(?:[^"\\]|\\.)*"), help: ("(?:[^"\\]|\\.)*"), constLabels: \{(.*)\}, variableLabels: \{(.*)\}\}$`)
	constPair = regexp.MustCompile(`([A-Za-z_][A-Za-z0-9_]*)=("(?:[^"\\]|\\.)*")`)
)

func parseDesc(d *prometheus.Desc) (name, help string, consts map[string]string, vars []string, err error) {
	s := d.String()
	g := descText.FindStringSubmatch(s)
	if g == nil {
		return "", "", nil, nil, fmt.Errorf("a metric descriptor docgen cannot read (has client_golang changed Desc.String?): %s", s)
	}
	if name, err = strconv.Unquote(g[1]); err == nil {
		help, err = strconv.Unquote(g[2])
	}
	if err != nil {
		return "", "", nil, nil, fmt.Errorf("%s: %w", s, err)
	}
	consts = map[string]string{}
	for _, p := range constPair.FindAllStringSubmatch(g[3], -1) {
		v, _ := strconv.Unquote(p[2])
		consts[p[1]] = v
	}
	for _, v := range strings.Split(g[4], ",") {
		v = strings.TrimSuffix(strings.TrimPrefix(strings.TrimSpace(v), "c("), ")")
		if v != "" {
			vars = append(vars, v)
		}
	}
	return name, help, consts, vars, nil
}

// MetricsSections are the generated sections of docs/metrics.md.
func MetricsSections() (map[string]string, error) {
	ms, err := AgentMetrics()
	if err != nil {
		return nil, err
	}
	var b strings.Builder
	b.WriteString("| metric | type | labels | what it counts |\n| --- | --- | --- | --- |\n")
	for _, m := range ms {
		labels := "—"
		if len(m.Labels) > 0 {
			var ls []string
			for _, l := range m.Labels {
				if k, v, ok := strings.Cut(l, "="); ok {
					l = k + " (" + strings.ReplaceAll(v, ",", ", ") + ")"
				}
				ls = append(ls, "`"+l+"`")
			}
			labels = strings.Join(ls, ", ")
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", m.Name, m.Type, cell(labels), cell(m.Help))
	}
	return map[string]string{"metrics": strings.TrimSuffix(b.String(), "\n")}, nil
}
