package killtest_test

import (
	"context"
	"slices"
	"testing"

	"github.com/fleet-agent/fleet-agent/internal/providers"
	"github.com/fleet-agent/fleet-agent/internal/substrate"
	"github.com/fleet-agent/fleet-agent/internal/substrate/killtest"
)

// recorder is a provider that records the calls made of it, in order, into
// the same log the kill writes to. Its other methods are never called here
// (the embedded nil interface would panic if they were).
type recorder struct {
	substrate.Provider
	log *[]string
}

func (r recorder) EnsureNodePool(_ context.Context, _ providers.Account, _ providers.ClusterRef, spec providers.NodePoolSpec) (providers.NodePool, error) {
	*r.log = append(*r.log, "call "+spec.Name)
	return providers.NodePool{Name: spec.Name}, nil
}

func (r recorder) DeleteNodePool(_ context.Context, _ providers.Account, _ providers.ClusterRef, name string) (providers.NodePool, error) {
	*r.log = append(*r.log, "delete "+name)
	return providers.NodePool{Name: name}, nil
}

// The kill runs after the chosen call was made and before its answer is
// handed back, once, and only for the chosen call and name; the answer is
// the provider's, untouched.
func TestKillAfterTheChosenCallOnce(t *testing.T) {
	var log []string
	k := &killtest.KillAfter{Call: killtest.EnsureNodePool, Name: "h100", Kill: func() { log = append(log, "kill") }}
	p := k.Provider(recorder{log: &log})
	ctx := t.Context()
	ensure := func(name string) {
		np, err := p.EnsureNodePool(ctx, providers.Account{}, providers.ClusterRef{}, providers.NodePoolSpec{Name: name})
		if err != nil || np.Name != name {
			t.Fatalf("the answer for %s is %+v, %v", name, np, err)
		}
		log = append(log, "answer "+name)
	}
	ensure("fa-abc123-l4")
	if _, err := p.DeleteNodePool(ctx, providers.Account{}, providers.ClusterRef{}, "fa-abc123-h100"); err != nil {
		t.Fatal(err)
	}
	if k.Fired() {
		t.Fatal("fired before the chosen call")
	}
	ensure("fa-abc123-h100")
	// A restarted agent wraps its new provider with the same KillAfter:
	// it does not kill again.
	p = k.Provider(recorder{log: &log})
	ensure("fa-abc123-h100")
	want := []string{"call fa-abc123-l4", "answer fa-abc123-l4", "delete fa-abc123-h100",
		"call fa-abc123-h100", "kill", "answer fa-abc123-h100", "call fa-abc123-h100", "answer fa-abc123-h100"}
	if !slices.Equal(log, want) || !k.Fired() {
		t.Fatalf("fired %v, order:\n got %q\nwant %q", k.Fired(), log, want)
	}
}
