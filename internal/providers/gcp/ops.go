package gcp

import (
	"context"

	container "google.golang.org/api/container/v1"

	"github.com/fleet-agent/fleet-agent/internal/providers"
)

// step is one GKE mutation a call makes.
type step struct {
	what string
	do   func(ctx context.Context) (*container.Operation, error)
}

// run makes a call's steps in order. GKE takes one operation per cluster
// at a time, so each step but the last is waited for (operationWait); the
// last is left running, as every mutation of the boundary is
// asynchronous. A step that fails after an earlier one was taken reports
// SideEffect Done: the call changed something. Each step is decided from
// what the call read, so a call repeated after a partial run continues
// where GKE stands.
func (s *session) run(ctx context.Context, a *Adapter, location string, steps []step) error {
	for i, st := range steps {
		op, err := st.do(ctx)
		if err != nil {
			err = classify(s.op, err, mutate)
			if e, ok := err.(*providers.Error); ok && i > 0 && e.SideEffect == providers.None {
				c := *e
				c.SideEffect = providers.Done
				c.Message += " (after " + steps[i-1].what + " was taken)"
				err = &c
			}
			return err
		}
		if i == len(steps)-1 {
			if op != nil && op.Status == "DONE" && op.Error != nil {
				return opError(s.op, st.what, op.Error.Code, op.Error.Message)
			}
			return nil
		}
		if err := s.wait(ctx, a, location, st.what, op); err != nil {
			return err
		}
	}
	return nil
}

// wait polls an operation until DONE, on the adapter's clock.
func (s *session) wait(ctx context.Context, a *Adapter, location, what string, op *container.Operation) error {
	w := a.cfg.OperationWait
	for i := 0; ; i++ {
		if op.Status == "DONE" {
			if op.Error != nil {
				return opError(s.op, what, op.Error.Code, op.Error.Message)
			}
			return nil
		}
		if i >= w.Polls {
			return &providers.Error{Op: s.op, Class: providers.Conflict, SideEffect: providers.Done, Reason: "inProgress",
				Message: "GKE operation " + op.Name + " (" + what + ") still runs; call again once it is done to make the rest of the change"}
		}
		if w.Every > 0 {
			select {
			case <-a.clock.After(w.Every):
			case <-ctx.Done():
				return &providers.Error{Op: s.op, Class: providers.Unknown, SideEffect: providers.Done, Message: "stopped waiting for GKE operation " + op.Name, Err: cause(ctx.Err())}
			}
		}
		next, err := s.ctr.Projects.Locations.Operations.Get(s.parent(location) + "/operations/" + op.Name).Context(ctx).Do()
		if err != nil {
			err = classify(s.op, err, read)
			if e, ok := err.(*providers.Error); ok {
				c := *e
				c.SideEffect = providers.Done
				return &c
			}
			return err
		}
		op = next
	}
}
