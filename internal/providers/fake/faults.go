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
	// After lets this many calls of Method through untouched before the
	// fault fires: a read-back that fails, not the read before the call.
	After int `yaml:"after" json:"after,omitempty"`
	// Lost makes a failing fault (a class, or drop) do nothing whatever its
	// side effect says: the request never reached the provider, and the
	// caller cannot tell (an unknown outcome that did not happen).
	Lost bool `yaml:"lost" json:"lost,omitempty"`
	// Vanish removes the object the call names right after the call,
	// whatever it answered: a create the provider dropped once accepted
	// (its work failed), or an object someone else deleted meanwhile (a
	// delete throttled while another hand removed the cluster). For
	// EnsureCluster, DeleteCluster, EnsureNodePool, ResizeNodePool and
	// DeleteNodePool.
	Vanish bool `yaml:"vanish" json:"vanish,omitempty"`
	// WorkFails makes the call succeed and the work it started fail at the
	// provider: a made or changed cluster or node pool goes to status
	// error; a delete leaves its object running, as it was. For the same
	// methods as Vanish.
	WorkFails bool   `yaml:"workFails" json:"workFails,omitempty"`
	Message   string `yaml:"message" json:"message,omitempty"`
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
	if f.RetryAfter < 0 || f.Latency < 0 || f.After < 0 {
		return fmt.Errorf("durations and after must not be negative")
	}
	if f.Lost && f.Class == "" && !f.Drop {
		return fmt.Errorf("lost is for a fault that fails (a class, or drop)")
	}
	if (f.Vanish || f.WorkFails) && !slices.Contains(objectMethods, f.Method) {
		return fmt.Errorf("vanish and workFails are for methods %v, not %q", objectMethods, f.Method)
	}
	if f.Vanish && f.WorkFails {
		return fmt.Errorf("a fault either removes its object (vanish) or fails its work (workFails), not both")
	}
	if f.Class == "" && !f.Drop && f.Latency == 0 && !f.DoneWithoutObject && !f.Vanish && !f.WorkFails {
		return fmt.Errorf("a fault needs a class, drop, doneWithoutObject, vanish, workFails or latency")
	}
	return nil
}

// objectMethods are the calls whose object a fault may remove or fail.
var objectMethods = []string{"EnsureCluster", "DeleteCluster", "EnsureNodePool", "ResizeNodePool", "DeleteNodePool", "RemoveNodes"}

// acts reports whether the call should still act although it fails.
func (f *Fault) acts() bool {
	return !f.Lost && (f.Drop || f.SideEffect == providers.Done || f.SideEffect == providers.Maybe)
}

// effects is what a fired fault does to the object of the call besides its
// answer.
type effects struct {
	// blank: answer success with an empty object (doneWithoutObject).
	blank bool
	// vanish: remove the object after the call.
	vanish bool
	// workFails: the work the call started fails at the provider.
	workFails bool
}

func (f *Fault) effects() effects {
	if f == nil {
		return effects{}
	}
	return effects{blank: f.DoneWithoutObject, vanish: f.Vanish, workFails: f.WorkFails}
}

// after applies a call's effects to the cluster it named (pool "") or to
// one of its node pools, under the lock: deleting marks a delete call.
func (f *Fake) after(fx effects, c *ClusterRecord, pool string, deleting bool) {
	if c == nil {
		return
	}
	switch {
	case fx.vanish && pool == "":
		f.settled(c.ID, &Operation{Kind: "delete"})
		delete(f.st.Clusters, c.ID)
		delete(f.st.Grants, c.ID)
	case fx.vanish:
		if p := c.NodePools[pool]; p != nil {
			f.settled(c.ID, &Operation{Kind: "delete"})
			delete(c.NodePools, pool)
		}
	case fx.workFails && pool == "" && deleting:
		c.Status, c.Op, c.Message = providers.ClusterRunning, nil, ""
	case fx.workFails && pool == "":
		c.Status, c.Op, c.Message = providers.ClusterError, nil, "injected: the provider's work failed"
	case fx.workFails:
		p := c.NodePools[pool]
		switch {
		case p == nil:
		case deleting:
			p.Status, p.Op, p.Message = providers.NodePoolRunning, nil, ""
		default:
			p.Status, p.Op, p.Message = providers.NodePoolError, nil, "injected: the provider's work failed"
		}
	}
}

// vanishNow removes, for a fault that fired without the call acting, the
// object the call named (someone else deleted it meanwhile).
func (f *Fake) vanishNow(fx effects, a account, ref providers.ClusterRef, pool string) {
	if !fx.vanish || f.lock() != nil {
		return
	}
	defer f.unlock()
	if cs := f.find(a, ref); len(cs) == 1 {
		f.after(fx, cs[0], pool, true)
		_ = f.persist()
	}
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
	skipped := false
	for i := range f.st.Faults {
		ft := &f.st.Faults[i]
		if ft.Method != "" && ft.Method != method {
			continue
		}
		if ft.After > 0 {
			ft.After--
			skipped = true
			continue
		}
		taken := *ft
		ft.Count--
		if ft.Count <= 0 {
			f.st.Faults = slices.Delete(f.st.Faults, i, i+1)
		}
		return &taken, f.persist()
	}
	if skipped {
		return nil, f.persist()
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
