package fake

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/fleet-agent/fleet-agent/internal/providers"
)

// Fault changes what the next calls do. Faults are kept in the state file,
// so a fault armed before a crash still fires after the restart, and one
// that fired does not fire again.
type Fault struct {
	// Method is the call it applies to ("EnsureCluster"); "" is any call.
	Method string `yaml:"method" json:"method,omitempty"`
	// Count is how many calls it applies to; 0 is 1.
	Count int `yaml:"count" json:"count"`
	// Class, when set, makes the call fail with a *providers.Error of this
	// class and SideEffect. With SideEffect done or maybe the call really
	// acts first; with none (or unset) it does nothing.
	Class      providers.Class      `yaml:"class" json:"class,omitempty"`
	SideEffect providers.SideEffect `yaml:"sideEffect" json:"sideEffect,omitempty"`
	// RetryAfter goes with Throttled.
	RetryAfter time.Duration `yaml:"retryAfter" json:"retryAfter,omitempty"`
	// Drop makes the call act and then lose its answer: the caller gets an
	// error that carries no class, as a reset connection would.
	Drop bool `yaml:"drop" json:"drop,omitempty"`
	// DoneWithoutObject makes EnsureCluster or EnsureNodePool do its work
	// and answer success with an empty object (no id, no name), as a 2xx
	// whose body the client cannot read: the caller knows it happened but
	// not what was made.
	DoneWithoutObject bool `yaml:"doneWithoutObject" json:"doneWithoutObject,omitempty"`
	// Latency delays the call on the injected clock (or until the context
	// ends) before anything else.
	Latency time.Duration `yaml:"latency" json:"latency,omitempty"`
	Message string        `yaml:"message" json:"message,omitempty"`
}

func (f Fault) validate() error {
	if f.Method != "" && !slices.Contains(methods, f.Method) {
		return fmt.Errorf("unknown method %q", f.Method)
	}
	if f.Count < 0 {
		return fmt.Errorf("count must not be negative")
	}
	if f.Class != "" && !slices.Contains(classes, f.Class) {
		return fmt.Errorf("unknown class %q", f.Class)
	}
	switch f.SideEffect {
	case "", providers.None, providers.Maybe, providers.Done:
	default:
		return fmt.Errorf("unknown sideEffect %q", f.SideEffect)
	}
	if f.SideEffect != "" && f.Class == "" {
		return fmt.Errorf("sideEffect needs a class")
	}
	if f.Class != "" && f.Drop {
		return fmt.Errorf("a fault either fails (class) or drops the answer, not both")
	}
	if f.DoneWithoutObject {
		switch {
		case f.Method != "EnsureCluster" && f.Method != "EnsureNodePool":
			return fmt.Errorf("doneWithoutObject is for method EnsureCluster or EnsureNodePool, not %q", f.Method)
		case f.Class != "" || f.Drop:
			return fmt.Errorf("a fault with doneWithoutObject succeeds: it takes no class and no drop")
		}
	}
	if f.RetryAfter < 0 || f.Latency < 0 {
		return fmt.Errorf("durations must not be negative")
	}
	if f.Class == "" && !f.Drop && f.Latency == 0 && !f.DoneWithoutObject {
		return fmt.Errorf("a fault needs a class, drop, doneWithoutObject or latency")
	}
	return nil
}

// acts reports whether the call should still act although it fails.
func (f *Fault) acts() bool {
	return f.Drop || f.SideEffect == providers.Done || f.SideEffect == providers.Maybe
}

func (f *Fault) err(method string) error {
	if f.Drop {
		// No class on purpose: an answer that never came is an error the
		// adapter cannot classify, so it reads as "retryable, maybe".
		return fmt.Errorf("%s: %w", method, ErrDropped)
	}
	msg := f.Message
	if msg == "" {
		msg = "injected " + string(f.Class)
	}
	side := f.SideEffect
	if side == "" {
		side = providers.None
	}
	return &providers.Error{Op: method, Class: f.Class, SideEffect: side, RetryAfter: f.RetryAfter, Reason: "injected", Message: msg}
}

// ErrDropped is what the error of a Drop fault wraps, for tests to
// recognise.
var ErrDropped = errors.New("connection reset before the answer arrived (injected)")

// InjectFault arms a fault. It is kept in the state file.
func (f *Fake) InjectFault(ft Fault) error {
	if err := ft.validate(); err != nil {
		return err
	}
	if ft.Count == 0 {
		ft.Count = 1
	}
	if err := f.lock(); err != nil {
		return err
	}
	defer f.unlock()
	f.st.Faults = append(f.st.Faults, ft)
	return f.persist()
}

// FailNext makes the next n calls of method ("" for any) fail with class
// and side effect; with done or maybe they act first.
func (f *Fake) FailNext(method string, n int, class providers.Class, side providers.SideEffect) error {
	return f.InjectFault(Fault{Method: method, Count: n, Class: class, SideEffect: side})
}

// DropNextResponse makes the next n calls of method act and lose their
// answer.
func (f *Fake) DropNextResponse(method string, n int) error {
	return f.InjectFault(Fault{Method: method, Count: n, Drop: true})
}

// AnswerWithoutObject makes the next n calls of method (EnsureCluster or
// EnsureNodePool) act and answer success with an empty object.
func (f *Fake) AnswerWithoutObject(method string, n int) error {
	return f.InjectFault(Fault{Method: method, Count: n, DoneWithoutObject: true})
}

// RateLimit throttles the next n calls of method, asking for retryAfter.
func (f *Fake) RateLimit(method string, n int, retryAfter time.Duration) error {
	return f.InjectFault(Fault{Method: method, Count: n, Class: providers.Throttled, SideEffect: providers.None, RetryAfter: retryAfter})
}

// AddLatency delays the next n calls of method by d on the injected clock.
func (f *Fake) AddLatency(method string, n int, d time.Duration) error {
	return f.InjectFault(Fault{Method: method, Count: n, Latency: d})
}

// ClearFaults disarms every fault.
func (f *Fake) ClearFaults() error {
	if err := f.lock(); err != nil {
		return err
	}
	defer f.unlock()
	f.st.Faults = nil
	return f.persist()
}

// takeFault consumes the first armed fault for method. Called with the lock held.
func (f *Fake) takeFault(method string) (*Fault, error) {
	for i := range f.st.Faults {
		ft := &f.st.Faults[i]
		if ft.Method != "" && ft.Method != method {
			continue
		}
		taken := *ft
		ft.Count--
		if ft.Count <= 0 {
			f.st.Faults = slices.Delete(f.st.Faults, i, i+1)
		}
		return &taken, f.persist()
	}
	return nil, nil
}

// wait sleeps d on the injected clock, or until ctx ends; then nothing has
// happened, and the error says so.
func (f *Fake) wait(ctx context.Context, method string, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	select {
	case <-f.clock.After(d):
		return nil
	case <-ctx.Done():
		return &providers.Error{Op: method, Class: providers.Unavailable, SideEffect: providers.None, Message: "cancelled while waiting for the provider", Err: ctx.Err()}
	}
}
