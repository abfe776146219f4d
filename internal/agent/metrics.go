package agent

import "time"

// Metrics receives what the agent does; the binary passes a Prometheus
// implementation, tests nothing.
type Metrics interface {
	Poll(err error, took time.Duration, fetched bool)
	Plan(err error, took time.Duration)
	// Apply counts one outcome of an apply: trigger tip, hand or heal;
	// result applied, refused (a trust rule or a refusal by the apply) or
	// failed. A commit that waits for the next poll is no outcome yet.
	Apply(trigger, result string, took time.Duration)
	ForgeError()
	Drift(drifted bool, err error)
}

type nopMetrics struct{}

func (nopMetrics) Poll(error, time.Duration, bool)     {}
func (nopMetrics) Plan(error, time.Duration)           {}
func (nopMetrics) Apply(string, string, time.Duration) {}
func (nopMetrics) ForgeError()                         {}
func (nopMetrics) Drift(bool, error)                   {}
