package fake_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/fleet-agent/fleet-agent/internal/clock"
	"github.com/fleet-agent/fleet-agent/internal/providers"
	"github.com/fleet-agent/fleet-agent/internal/providers/fake"
	"github.com/fleet-agent/fleet-agent/internal/refusal"
)

// TestFaultClasses: every class with every side effect fails the call as
// told; with done or maybe the cluster really is made, with none it is not;
// the fault is spent after one call.
func TestFaultClasses(t *testing.T) {
	classes := []providers.Class{providers.Invalid, providers.NotFound, providers.Conflict, providers.Throttled, providers.Unavailable, providers.Terminal, providers.Unknown}
	sides := []providers.SideEffect{providers.None, providers.Maybe, providers.Done}
	retryable := map[providers.Class]bool{providers.Conflict: true, providers.Throttled: true, providers.Unavailable: true, providers.Unknown: true}
	for _, class := range classes {
		for _, side := range sides {
			t.Run(string(class)+"/"+string(side), func(t *testing.T) {
				f := open(t, config(t), clock.NewFake(epoch))
				if err := f.FailNext("EnsureCluster", 1, class, side); err != nil {
					t.Fatal(err)
				}
				_, err := f.EnsureCluster(t.Context(), acct, clusterSpec("faulty"))
				if providers.ClassOf(err) != class || providers.SideEffectOf(err) != side {
					t.Fatalf("err %v: class %q side %q, want %q %q", err, providers.ClassOf(err), providers.SideEffectOf(err), class, side)
				}
				if providers.Retryable(err) != retryable[class] {
					t.Errorf("Retryable = %v", providers.Retryable(err))
				}
				if got, want := errors.Is(err, providers.ErrNotFound), class == providers.NotFound; got != want {
					t.Errorf("errors.Is(ErrNotFound) = %v", got)
				}
				_, getErr := f.GetCluster(t.Context(), acct, providers.ClusterRef{Location: "fake-east", Name: "faulty"})
				happened := getErr == nil
				if want := side != providers.None; happened != want {
					t.Errorf("cluster exists after the fault: %v, want %v (%v)", happened, want, getErr)
				}
				if _, err := f.EnsureCluster(t.Context(), acct, clusterSpec("faulty")); err != nil {
					t.Errorf("the fault fired twice: %v", err)
				}
				if n := len(f.Snapshot().Clusters); n != 2 { // ours and the seeded one
					t.Errorf("%d clusters, want 2", n)
				}
			})
		}
	}
}

func TestFaultTargetsItsMethod(t *testing.T) {
	f := open(t, config(t), clock.NewFake(epoch))
	if err := f.FailNext("GetCluster", 2, providers.Unavailable, providers.None); err != nil {
		t.Fatal(err)
	}
	if err := f.Verify(t.Context(), acct); err != nil {
		t.Fatalf("Verify hit GetCluster's fault: %v", err)
	}
	ref := providers.ClusterRef{Location: "fake-east", Name: "x"}
	for i := range 2 {
		if _, err := f.GetCluster(t.Context(), acct, ref); providers.ClassOf(err) != providers.Unavailable {
			t.Fatalf("GetCluster %d: %v", i, err)
		}
	}
	if _, err := f.GetCluster(t.Context(), acct, ref); !errors.Is(err, providers.ErrNotFound) {
		t.Fatalf("after the faults: %v", err)
	}
	if f.Calls("GetCluster") != 3 || f.Calls("Verify") != 1 {
		t.Errorf("calls: GetCluster %d, Verify %d", f.Calls("GetCluster"), f.Calls("Verify"))
	}
	if err := f.FailNext("", 1, providers.Terminal, providers.None); err != nil {
		t.Fatal(err)
	}
	if err := f.Verify(t.Context(), acct); providers.ClassOf(err) != providers.Terminal {
		t.Errorf("a fault for any method missed Verify: %v", err)
	}
	if err := f.FailNext("Nope", 1, providers.Terminal, ""); err == nil {
		t.Error("a fault for an unknown method was armed")
	}
}

// TestDropResponse: the create happens, the answer is lost with an error
// that carries no class; reading back by name finds what was made.
func TestDropResponse(t *testing.T) {
	f := open(t, config(t), clock.NewFake(epoch))
	if err := f.DropNextResponse("EnsureCluster", 1); err != nil {
		t.Fatal(err)
	}
	_, err := f.EnsureCluster(t.Context(), acct, clusterSpec("dropped"))
	if !errors.Is(err, fake.ErrDropped) || providers.ClassOf(err) != providers.Unknown || providers.SideEffectOf(err) != providers.Maybe || !providers.Retryable(err) {
		t.Fatalf("dropped answer: %v (class %q, side %q)", err, providers.ClassOf(err), providers.SideEffectOf(err))
	}
	c, err := f.GetCluster(t.Context(), acct, providers.ClusterRef{Location: "fake-east", Name: "dropped"})
	if err != nil || c.Ref.ID == "" {
		t.Fatalf("read-back after a dropped answer: %+v, %v", c, err)
	}
	again, err := f.EnsureCluster(t.Context(), acct, clusterSpec("dropped"))
	if err != nil || again.Ref.ID != c.Ref.ID {
		t.Fatalf("retry after a dropped answer made %+v (%v), first %+v", again.Ref, err, c.Ref)
	}
	if got := f.Snapshot().Clusters[c.Ref.ID].ClientTokens; len(got) != 1 {
		t.Errorf("client tokens %v", got)
	}
}

func TestRateLimit(t *testing.T) {
	f := open(t, config(t), clock.NewFake(epoch))
	if err := f.RateLimit("Verify", 2, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		err := f.Verify(t.Context(), acct)
		if providers.ClassOf(err) != providers.Throttled || providers.RetryAfterOf(err) != 30*time.Second || providers.SideEffectOf(err) != providers.None || providers.Code(err) != refusal.Unavailable {
			t.Fatalf("throttled: %v", err)
		}
	}
	if err := f.Verify(t.Context(), acct); err != nil {
		t.Fatalf("after the limit: %v", err)
	}
}

// TestLatency: a slow call waits on the injected clock, and a context that
// ends first leaves nothing done.
func TestLatency(t *testing.T) {
	clk := clock.NewFake(epoch)
	f := open(t, config(t), clk)
	if err := f.AddLatency("EnsureCluster", 1, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := f.EnsureCluster(t.Context(), acct, clusterSpec("slow"))
		done <- err
	}()
	waitForWaiter(t, clk)
	select {
	case err := <-done:
		t.Fatalf("returned before the clock moved: %v", err)
	default:
	}
	clk.Advance(5 * time.Second)
	if err := <-done; err != nil {
		t.Fatalf("slow EnsureCluster: %v", err)
	}

	if err := f.AddLatency("EnsureCluster", 1, time.Hour); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	go func() {
		_, err := f.EnsureCluster(ctx, acct, clusterSpec("never"))
		done <- err
	}()
	waitForWaiter(t, clk)
	cancel()
	err := <-done
	if !errors.Is(err, context.Canceled) || providers.SideEffectOf(err) != providers.None {
		t.Fatalf("cancelled while slow: %v (side %q)", err, providers.SideEffectOf(err))
	}
	if _, err := f.GetCluster(t.Context(), acct, providers.ClusterRef{Name: "never"}); !errors.Is(err, providers.ErrNotFound) {
		t.Errorf("a cancelled call acted: %v", err)
	}
}

func waitForWaiter(t *testing.T, clk *clock.Fake) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for clk.Waiters() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the call never waited on the clock")
		}
		time.Sleep(time.Millisecond)
	}
}

// TestRestart: a new fake over the same state file keeps clusters, node
// pools, operations in flight with their progress, credentials and armed
// faults.
func TestRestart(t *testing.T) {
	clk := clock.NewFake(epoch)
	cfg := config(t)
	f := open(t, cfg, clk)
	ctx := t.Context()
	c, err := f.EnsureCluster(ctx, acct, clusterSpec("survivor"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.GetCluster(ctx, acct, c.Ref); err != nil { // one of three steps
		t.Fatal(err)
	}
	if err := f.FailNext("DeleteCluster", 1, providers.Unavailable, providers.None); err != nil {
		t.Fatal(err)
	}

	// Crash: drop f without any cleanup and open the file again.
	g := open(t, cfg, clk)
	snap := g.Snapshot().Clusters[c.Ref.ID]
	if snap == nil || snap.Status != providers.ClusterProvisioning || snap.Op == nil || snap.Op.Observed != 1 {
		t.Fatalf("after restart: %+v", snap)
	}
	for i, want := range []providers.ClusterStatus{providers.ClusterProvisioning, providers.ClusterRunning} {
		got, err := g.GetCluster(ctx, acct, providers.ClusterRef{Location: "fake-east", Name: "survivor"})
		if err != nil || got.Status != want {
			t.Fatalf("read %d after restart: %s, %v; want %s", i, got.Status, err, want)
		}
	}
	pool := providers.NodePoolSpec{Name: "p", Shape: providers.Shape{MachineType: "fake-cpu-4"}, Size: providers.Size{NodeCount: 1}}
	if _, err := g.EnsureNodePool(ctx, acct, c.Ref, pool); err != nil {
		t.Fatal(err)
	}
	cred, err := g.Credentials(ctx, acct, c.Ref)
	if err != nil {
		t.Fatal(err)
	}

	h := open(t, cfg, clk)
	if !h.Accepts(cred) {
		t.Error("a credential issued before the restart is refused after it")
	}
	if p, err := h.GetNodePool(ctx, acct, c.Ref, "p"); err != nil || p.Status != providers.NodePoolProvisioning {
		t.Errorf("node pool after restart: %+v, %v", p, err)
	}
	if _, err := h.DeleteCluster(ctx, acct, c.Ref); providers.ClassOf(err) != providers.Unavailable {
		t.Errorf("the fault armed before the restart did not fire: %v", err)
	}
	if _, err := h.DeleteCluster(ctx, acct, c.Ref); err != nil {
		t.Errorf("the fault fired twice: %v", err)
	}
	// No temporary file is left behind: only the state and its lock file.
	entries, _ := os.ReadDir(filepath.Dir(cfg.StatePath))
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if want := []string{"fake.json", "fake.json.lock"}; !slices.Equal(names, want) {
		t.Errorf("state dir holds %v, want %v", names, want)
	}
}

// TestConfigFaultsFireOnce: faults of the config are armed with a new state
// file only, so a restart does not arm them again.
func TestConfigFaultsFireOnce(t *testing.T) {
	cfg := config(t)
	cfg.Faults = []fake.Fault{{Method: "Verify", Class: providers.Unavailable}}
	f := open(t, cfg, clock.NewFake(epoch))
	if err := f.Verify(t.Context(), acct); providers.ClassOf(err) != providers.Unavailable {
		t.Fatalf("config fault: %v", err)
	}
	g := open(t, cfg, clock.NewFake(epoch))
	if err := g.Verify(t.Context(), acct); err != nil {
		t.Fatalf("config fault fired again after a restart: %v", err)
	}
}

// TestDeterminism: the same calls give the same ids, tokens and state file,
// byte for byte.
func TestDeterminism(t *testing.T) {
	run := func() ([]string, []byte) {
		clk := clock.NewFake(epoch)
		cfg := config(t)
		cfg.Steps = fake.Steps{}
		f := open(t, cfg, clk)
		ctx := t.Context()
		var out []string
		for _, name := range []string{"a", "b"} {
			c, err := f.EnsureCluster(ctx, acct, clusterSpec(name))
			if err != nil {
				t.Fatal(err)
			}
			p, err := f.EnsureNodePool(ctx, acct, c.Ref, providers.NodePoolSpec{Name: "p", Shape: providers.Shape{MachineType: "fake-cpu-4"}, Size: providers.Size{NodeCount: 1}})
			if err != nil {
				t.Fatal(err)
			}
			cred, err := f.Credentials(ctx, acct, c.Ref)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, c.Ref.ID, c.Outputs.GlobalID, p.ID, cred.Token)
		}
		b, err := os.ReadFile(cfg.StatePath)
		if err != nil {
			t.Fatal(err)
		}
		return out, b
	}
	ids1, state1 := run()
	ids2, state2 := run()
	if strings.Join(ids1, ",") != strings.Join(ids2, ",") {
		t.Errorf("ids differ:\n%v\n%v", ids1, ids2)
	}
	if !bytes.Equal(state1, state2) {
		t.Error("state files differ")
	}
	if ids1[0] == ids1[4] {
		t.Error("two clusters got one id")
	}
}

func TestNotFound(t *testing.T) {
	f := open(t, config(t), clock.NewFake(epoch))
	ctx := t.Context()
	ref := providers.ClusterRef{Location: "fake-east", Name: "ghost"}
	checks := map[string]func() error{
		"GetCluster":    func() error { _, err := f.GetCluster(ctx, acct, ref); return err },
		"DeleteCluster": func() error { _, err := f.DeleteCluster(ctx, acct, ref); return err },
		"ReadAdoptable": func() error { _, err := f.ReadAdoptable(ctx, acct, "fake-east/ghost"); return err },
		"ListNodePools": func() error { _, err := f.ListNodePools(ctx, acct, ref); return err },
		"GetNodePool":   func() error { _, err := f.GetNodePool(ctx, acct, ref, "p"); return err },
		"Credentials":   func() error { _, err := f.Credentials(ctx, acct, ref); return err },
		"RevokeAccess":  func() error { return f.RevokeAccess(ctx, acct, ref) },
		"MachineType":   func() error { _, err := f.MachineType(ctx, acct, "fake-east", "nope"); return err },
		"MachineType elsewhere": func() error {
			_, err := f.MachineType(ctx, acct, "fake-west", "fake-h100x8") // exists, but only in fake-east
			return err
		},
	}
	for name, call := range checks {
		err := call()
		if !errors.Is(err, providers.ErrNotFound) || providers.ClassOf(err) != providers.NotFound || providers.SideEffectOf(err) != providers.None {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// TestCredentialsRefused: the account's token is resolved at every call and
// must match the configured one.
func TestCredentialsRefused(t *testing.T) {
	f := open(t, config(t), clock.NewFake(epoch))
	tests := []struct {
		name   string
		acct   providers.Account
		class  providers.Class
		reason string
	}{
		{"right token", acct, "", ""},
		{"same value, other reference", account("b", "team-a", "secret://other-token"), "", ""},
		{"wrong token", account("c", "team-a", "secret://wrong-token"), providers.Terminal, "credentialsRefused"},
		{"no token", account("d", "team-a", ""), providers.Terminal, "credentialsRefused"},
		{"missing secret", account("e", "team-a", "secret://gone"), providers.Terminal, "secretMissing"},
		{"unknown key", providers.Account{Name: "f", Provider: "fake", Config: []byte(`{"tokn":"secret://fake-token"}`)}, providers.Invalid, "accountConfig"},
		{"other provider", providers.Account{Name: "g", Provider: "aws"}, providers.Invalid, "wrongProvider"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := f.Verify(t.Context(), tt.acct)
			if providers.ClassOf(err) != tt.class || providers.ReasonOf(err) != tt.reason {
				t.Fatalf("Verify: %v (class %q reason %q)", err, providers.ClassOf(err), providers.ReasonOf(err))
			}
			if err != nil && strings.Contains(err.Error(), "s3cret") {
				t.Error("the error shows a secret value")
			}
			if tt.class == providers.Terminal {
				if providers.Code(err) != refusal.InvalidState {
					t.Errorf("code %q", providers.Code(err))
				}
				if _, err := f.EnsureCluster(t.Context(), tt.acct, clusterSpec("x")); providers.ClassOf(err) != providers.Terminal {
					t.Errorf("EnsureCluster with refused credentials: %v", err)
				}
			}
		})
	}
}

// TestAccessExpiresAndRevokes: a credential dies after 600 s on the
// injected clock, and at once when access is revoked.
func TestAccessExpiresAndRevokes(t *testing.T) {
	clk := clock.NewFake(epoch)
	cfg := config(t)
	cfg.Steps = fake.Steps{}
	f := open(t, cfg, clk)
	ctx := t.Context()
	c, err := f.ReadAdoptable(ctx, acct, "fake-east/theirs")
	if err != nil {
		t.Fatal(err)
	}
	cred, err := f.Credentials(ctx, acct, c.Ref)
	if err != nil {
		t.Fatal(err)
	}
	if !cred.ExpiresAt.Equal(epoch.Add(600*time.Second)) || !f.Accepts(cred) || !f.HasAccess(c.Ref.ID) {
		t.Fatalf("fresh credential: expires %s, accepted %v, access %v", cred.ExpiresAt, f.Accepts(cred), f.HasAccess(c.Ref.ID))
	}
	clk.Advance(599 * time.Second)
	if !f.Accepts(cred) {
		t.Error("refused before it expired")
	}
	clk.Advance(time.Second)
	if f.Accepts(cred) {
		t.Error("accepted after it expired")
	}
	cred, err = f.Credentials(ctx, acct, c.Ref)
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Snapshot().Credentials) != 1 {
		t.Errorf("expired credentials kept: %d", len(f.Snapshot().Credentials))
	}
	for range 2 {
		if err := f.RevokeAccess(ctx, acct, c.Ref); err != nil {
			t.Fatalf("RevokeAccess: %v", err)
		}
	}
	if f.Accepts(cred) || f.HasAccess(c.Ref.ID) {
		t.Error("access outlived its revocation")
	}
	b, err := os.ReadFile(cfg.StatePath)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(b, []byte(cred.Token)) {
		t.Error("the state file holds a token")
	}
}

// TestClockDrivenSteps: with stepEvery, time on the injected clock finishes
// operations that nobody reads.
func TestClockDrivenSteps(t *testing.T) {
	clk := clock.NewFake(epoch)
	cfg := config(t)
	cfg.Steps.Cluster, cfg.StepEvery = 3, 10*time.Second
	f := open(t, cfg, clk)
	c, err := f.EnsureCluster(t.Context(), acct, clusterSpec("timed"))
	if err != nil {
		t.Fatal(err)
	}
	clk.Advance(19 * time.Second) // one clock step, plus the read below: two of three
	if got, _ := f.GetCluster(t.Context(), acct, c.Ref); got.Status != providers.ClusterProvisioning {
		t.Fatalf("finished early: %s", got.Status)
	}
	clk.Advance(11 * time.Second)
	if got := f.Snapshot().Clusters[c.Ref.ID]; got.Status != providers.ClusterProvisioning {
		t.Fatalf("a snapshot moved the operation: %s", got.Status)
	}
	if got, _ := f.GetCluster(t.Context(), acct, c.Ref); got.Status != providers.ClusterRunning {
		t.Fatalf("not finished after the clock moved: %s", got.Status)
	}
}

// TestTwoAccountsOneCluster: a seeded cluster reads with one global id
// through any account; a created one is found by name only in its project.
func TestTwoAccountsOneCluster(t *testing.T) {
	f := open(t, config(t), clock.NewFake(epoch))
	ctx := t.Context()
	other := account("other", "team-b", "secret://fake-token")
	a, err := f.ReadAdoptable(ctx, acct, "fake-east/theirs")
	if err != nil {
		t.Fatal(err)
	}
	b, err := f.ReadAdoptable(ctx, other, a.Ref.ID) // by id this time
	if err != nil {
		t.Fatal(err)
	}
	if a.Outputs.GlobalID == "" || a.Outputs.GlobalID != b.Outputs.GlobalID {
		t.Fatalf("global ids %q and %q", a.Outputs.GlobalID, b.Outputs.GlobalID)
	}
	mine, err := f.EnsureCluster(ctx, acct, clusterSpec("mine"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.GetCluster(ctx, other, providers.ClusterRef{Location: "fake-east", Name: "mine"}); !errors.Is(err, providers.ErrNotFound) {
		t.Errorf("another project found my cluster by name: %v", err)
	}
	theirs, err := f.EnsureCluster(ctx, other, clusterSpec("mine"))
	if err != nil || theirs.Ref.ID == mine.Ref.ID {
		t.Errorf("another project's cluster of the same name: %+v, %v", theirs.Ref, err)
	}
	seeded, err := f.SeedAdoptable(fake.SeedCluster{Name: "theirs", Location: "fake-east"})
	if err != nil || seeded.Ref.ID != a.Ref.ID {
		t.Errorf("seeding again: %+v, %v", seeded.Ref, err)
	}
	if _, err := f.SeedAdoptable(fake.SeedCluster{Name: "x", Location: "mars"}); err == nil {
		t.Error("seeded a cluster in an unknown location")
	}
}

// TestBusyAndInvalid: changes to a busy object are Conflict (retryable,
// nothing done); requests that can never work are Invalid.
func TestBusyAndInvalid(t *testing.T) {
	f := open(t, config(t), clock.NewFake(epoch))
	ctx := t.Context()
	c, err := f.EnsureCluster(ctx, acct, clusterSpec("busy"))
	if err != nil {
		t.Fatal(err)
	}
	cpu := providers.NodePoolSpec{Name: "p", Shape: providers.Shape{MachineType: "fake-cpu-4"}, Size: providers.Size{NodeCount: 1}}
	_, err = f.EnsureNodePool(ctx, acct, c.Ref, cpu)
	if providers.ClassOf(err) != providers.Conflict || !providers.Retryable(err) || providers.SideEffectOf(err) != providers.None {
		t.Fatalf("node pool on a provisioning cluster: %v", err)
	}
	if _, err := f.Credentials(ctx, acct, c.Ref); providers.ClassOf(err) != providers.Conflict {
		t.Errorf("credentials of a provisioning cluster: %v", err)
	}
	runUntil(t, f, c.Ref, 5)

	invalid := []struct {
		reason string
		spec   providers.ClusterSpec
	}{
		{"location", providers.ClusterSpec{Name: "x", Location: "mars"}},
		{"location", providers.ClusterSpec{Name: "x", Location: "fake-east-a"}}, // a zone, without zonalClusters
		{"version", providers.ClusterSpec{Name: "x", Location: "fake-east", Version: "0.1"}},
		{"name", providers.ClusterSpec{Name: "Not_A_Label", Location: "fake-east"}},
		{"modeChange", providers.ClusterSpec{Name: "busy", Location: "fake-west"}},
		{"modeChange", providers.ClusterSpec{Name: "busy", Location: "fake-east", PrivateNodes: true}},
		{"downgrade", providers.ClusterSpec{Name: "busy", Location: "fake-east", Version: "1.33"}},
	}
	for _, tt := range invalid {
		_, err := f.EnsureCluster(ctx, acct, tt.spec)
		if providers.ClassOf(err) != providers.Invalid || providers.ReasonOf(err) != tt.reason || providers.Code(err) != refusal.PlanBlocked {
			t.Errorf("%+v: %v (reason %q, want %q)", tt.spec, err, providers.ReasonOf(err), tt.reason)
		}
	}
	pools := map[string]func(*providers.NodePoolSpec){
		"machineType":  func(p *providers.NodePoolSpec) { p.MachineType = "fake-nope" },
		"accelerators": func(p *providers.NodePoolSpec) { p.Accelerators = &providers.Accelerators{Type: "nvidia-l4", Count: 1} },
		"zone":         func(p *providers.NodePoolSpec) { p.Zones = []string{"fake-west-a"} },
		"disk":         func(p *providers.NodePoolSpec) { p.DiskGiB = 5 },
		"size":         func(p *providers.NodePoolSpec) { p.NodeCount = -1 },
		"autoscaling":  func(p *providers.NodePoolSpec) { p.Autoscaling = &providers.Autoscaling{MinNodes: 3, MaxNodes: 2} },
		"name":         func(p *providers.NodePoolSpec) { p.Name = "-bad" },
	}
	for reason, mutate := range pools {
		spec := cpu
		mutate(&spec)
		_, err := f.EnsureNodePool(ctx, acct, c.Ref, spec)
		if providers.ClassOf(err) != providers.Invalid || providers.ReasonOf(err) != reason {
			t.Errorf("%s: %v (reason %q)", reason, err, providers.ReasonOf(err))
		}
	}
	// The h100 type lives in fake-east only: in a fake-west cluster it is no
	// machine type at all.
	west, err := f.EnsureCluster(ctx, acct, providers.ClusterSpec{Name: "west", Location: "fake-west"})
	if err != nil {
		t.Fatal(err)
	}
	runUntil(t, f, west.Ref, 5)
	h100 := cpu
	h100.MachineType = "fake-h100x8"
	if _, err := f.EnsureNodePool(ctx, acct, west.Ref, h100); providers.ReasonOf(err) != "machineType" {
		t.Errorf("h100 in fake-west: %v", err)
	}

	// An upgrade in flight is busy for another version, idempotent for its own.
	if _, err := f.EnsureCluster(ctx, acct, providers.ClusterSpec{Name: "busy", Location: "fake-east", Version: "1.35"}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.EnsureCluster(ctx, acct, providers.ClusterSpec{Name: "busy", Location: "fake-east", Version: "1.35"}); err != nil {
		t.Errorf("the same upgrade again: %v", err)
	}
	if got := f.Snapshot().Clusters[c.Ref.ID]; got.Status != providers.ClusterUpdating || got.Op.Target != "1.35" {
		t.Errorf("upgrade: %+v", got)
	}
}

func TestOpenFromConfigBlock(t *testing.T) {
	dir := t.TempDir()
	text := "statePath: " + filepath.Join(dir, "s.json") + "\n" +
		"steps: { cluster: 1 }\n" +
		"stepEvery: 5s\n" +
		"zeroNodes: false\n" +
		"machineTypes:\n  - { name: big, gpus: { type: nvidia-b200, count: 8 } }\n" +
		"adoptable:\n  - { name: theirs, location: fake-west, nodePools: [{ name: own, machineType: big, nodeCount: 1 }] }\n" +
		"faults:\n  - { method: Verify, class: throttled, retryAfter: 1m }\n"
	var n yaml.Node
	if err := yaml.Unmarshal([]byte(text), &n); err != nil {
		t.Fatal(err)
	}
	reg := providers.NewRegistry()
	if err := reg.Register(providers.FakeID, fake.Factory(fake.WithClock(clock.NewFake(epoch)))); err != nil {
		t.Fatal(err)
	}
	k, err := reg.Open(providers.FakeID, &n, nil)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	f := k.(*fake.Fake)
	cfg := f.Config()
	if cfg.Steps.Cluster != 1 || cfg.Steps.NodePool != 2 || cfg.StepEvery != 5*time.Second || cfg.ZeroNodes || !cfg.Spot || len(cfg.Locations) != 2 {
		t.Errorf("config: %+v", cfg)
	}
	noToken := account("x", "", "")
	if err := f.Verify(t.Context(), noToken); providers.RetryAfterOf(err) != time.Minute {
		t.Errorf("config fault: %v", err)
	}
	mt, err := f.MachineType(t.Context(), noToken, "fake-west-a", "big")
	if err != nil || mt.Accelerators == nil || mt.Accelerators.Count != 8 {
		t.Errorf("machine type: %+v, %v", mt, err)
	}
	if _, err := f.ReadAdoptable(t.Context(), noToken, "fake-west/theirs"); err != nil {
		t.Errorf("seeded cluster: %v", err)
	}

	bad := []struct{ text, want string }{
		{"steps: { clusters: 1 }\n", `line 1: unknown key "steps.clusters"`},
		{"statePath: x\ncolour: red\n", `line 2: unknown key "colour"`},
		{"faults:\n  - { method: Verify, clas: throttled }\n", `line 2: unknown key "faults[0].clas"`},
		{"faults:\n  - { method: Verfy, class: throttled }\n", `unknown method "Verfy"`},
		{"defaultVersion: '9.9'\n", `defaultVersion "9.9"`},
		{"adoptable: [{ name: x, location: mars }]\n", "known location"},
		{"stepEvery: soon\n", "line 1"},
	}
	for _, b := range bad {
		var n yaml.Node
		if err := yaml.Unmarshal([]byte(b.text), &n); err != nil {
			t.Fatal(err)
		}
		_, err := reg.Open(providers.FakeID, &n, nil)
		if err == nil || !strings.Contains(err.Error(), b.want) || refusal.CodeOf(err) != refusal.InvalidInput {
			t.Errorf("%q: %v, want INVALID_INPUT with %q", b.text, err, b.want)
		}
	}
}

func TestCorruptStateIsRefused(t *testing.T) {
	cfg := config(t)
	for _, content := range []string{"{not json", `{"version": 99}`} {
		if err := os.WriteFile(cfg.StatePath, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := fake.New(cfg, testSecrets); err == nil {
			t.Errorf("opened a state file holding %q", content)
		}
	}
}

// TestZonalClusters: with zonalClusters a cluster may sit in a zone (as on
// GKE), its pools default to that zone's region's zones, and the rules say
// so.
func TestZonalClusters(t *testing.T) {
	cfg := config(t)
	cfg.ZonalClusters, cfg.Steps = true, fake.Steps{}
	f := open(t, cfg, clock.NewFake(epoch))
	ctx := t.Context()
	rules, err := f.Rules(ctx, acct)
	if err != nil || !rules.AllowsClusterIn(providers.Zone) || !rules.AllowsClusterIn(providers.Region) {
		t.Fatalf("rules: %+v, %v", rules, err)
	}
	locs, err := f.Locations(ctx, acct)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, l := range locs {
		names = append(names, string(l.Kind)+":"+l.Name+"<"+l.Region)
	}
	want := "region:fake-east<,region:fake-west<,zone:fake-east-a<fake-east,zone:fake-east-b<fake-east,zone:fake-east-c<fake-east,zone:fake-west-a<fake-west"
	if strings.Join(names, ",") != want {
		t.Errorf("locations %v", names)
	}
	c, err := f.EnsureCluster(ctx, acct, providers.ClusterSpec{Name: "zonal", Location: "fake-east-b"})
	if err != nil || c.Outputs.Location != "fake-east-b" {
		t.Fatalf("zonal cluster: %+v, %v", c, err)
	}
	p, err := f.EnsureNodePool(ctx, acct, c.Ref, providers.NodePoolSpec{Name: "p", Shape: providers.Shape{MachineType: "fake-h100x8", Zones: []string{"fake-east-c", "fake-east-a"}}, Size: providers.Size{NodeCount: 1}})
	if err != nil || strings.Join(p.Zones, ",") != "fake-east-a,fake-east-c" || p.Accelerators == nil || p.Accelerators.Count != 8 || p.DiskGiB != 100 {
		t.Fatalf("pool in a zonal cluster: %+v, %v", p, err)
	}
	// The same shape written differently (zones in another order, GPUs and
	// disk spelled out) is no change.
	same := providers.NodePoolSpec{Name: "p", Shape: providers.Shape{MachineType: "fake-h100x8", Zones: []string{"fake-east-a", "fake-east-c"}, DiskGiB: 100, Accelerators: &providers.Accelerators{Type: "nvidia-h100", Count: 8}}, Size: providers.Size{NodeCount: 1}}
	if _, err := f.EnsureNodePool(ctx, acct, c.Ref, same); err != nil {
		t.Errorf("the same shape spelled out: %v", err)
	}
}

// A state file whose directory does not exist yet (a plan before the
// agent's first run) is made, directory and all.
func TestStatePathInANewDirectory(t *testing.T) {
	cfg := config(t)
	cfg.StatePath = filepath.Join(t.TempDir(), "not", "yet", "fake.json")
	f := open(t, cfg, clock.NewFake(epoch))
	if _, err := f.EnsureCluster(t.Context(), acct, providers.ClusterSpec{Name: "c1", Location: "fake-east"}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(cfg.StatePath); err != nil {
		t.Fatalf("the state was not written: %v", err)
	}
}

// A call whose term of leadership ended is refused with the account held
// (where a cloud checks its preconditions), before anything is read or
// done, and the refusal is in the account's refusal log by method.
func TestCallOfAnEndedTermIsRefusedAndLogged(t *testing.T) {
	cfg := config(t)
	f := open(t, cfg, clock.NewFake(epoch))
	leading := true
	ctx := providers.WithFence(t.Context(), func() error {
		if leading {
			return nil
		}
		return errors.New("the term ended")
	})
	c, err := f.EnsureCluster(ctx, acct, clusterSpec("kept"))
	if err != nil {
		t.Fatal(err)
	}
	leading = false
	if _, err := f.DeleteCluster(ctx, acct, c.Ref); providers.ClassOf(err) != providers.Unavailable {
		t.Fatalf("a call of an ended term: %v", err)
	}
	if _, err := f.EnsureCluster(ctx, acct, clusterSpec("never")); err == nil {
		t.Fatal("a create of an ended term was made")
	}
	leading = true
	if _, err := f.GetCluster(ctx, acct, c.Ref); err != nil {
		t.Errorf("the refused delete deleted: %v", err)
	}
	if _, err := f.GetCluster(ctx, acct, providers.ClusterRef{Name: "never"}); providers.ClassOf(err) != providers.NotFound {
		t.Errorf("the refused create made its cluster: %v", err)
	}
	b, err := os.ReadFile(fake.RefusedLog(cfg.StatePath))
	if err != nil || string(b) != "DeleteCluster\nEnsureCluster\n" {
		t.Errorf("refusal log: %q, %v", b, err)
	}
}
