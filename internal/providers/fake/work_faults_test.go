package fake_test

import (
	"errors"
	"testing"

	"github.com/fleet-agent/fleet-agent/internal/clock"
	"github.com/fleet-agent/fleet-agent/internal/providers"
	"github.com/fleet-agent/fleet-agent/internal/providers/fake"
)

// TestWorkFaults: lost, vanish, workFails and after each do to a call's
// object what they say, and a read shows it.
func TestWorkFaults(t *testing.T) {
	ref := providers.ClusterRef{Location: "fake-east", Name: "c"}
	getCluster := func(t *testing.T, f *fake.Fake) string {
		c, err := f.GetCluster(t.Context(), acct, ref)
		if errors.Is(err, providers.ErrNotFound) {
			return "absent"
		}
		if err != nil {
			return "error: " + err.Error()
		}
		return string(c.Status)
	}
	getPool := func(t *testing.T, f *fake.Fake) string {
		p, err := f.GetNodePool(t.Context(), acct, ref, "p")
		if errors.Is(err, providers.ErrNotFound) {
			return "absent"
		}
		if err != nil {
			return "error: " + err.Error()
		}
		return string(p.Status)
	}
	spec := lagPool
	spec.Name = "p"
	cases := []struct {
		name  string
		fault fake.Fault
		// pool: the call is on a node pool of a running cluster c (made
		// first, with pool p when the call is not its create).
		pool, made bool
		call       func(t *testing.T, f *fake.Fake) error
		wantErr    bool
		want       string
	}{
		{name: "a lost create does nothing", fault: fake.Fault{Method: "EnsureCluster", Class: providers.Unavailable, SideEffect: providers.Maybe, Lost: true},
			call: func(t *testing.T, f *fake.Fake) error {
				_, err := f.EnsureCluster(t.Context(), acct, clusterSpec("c"))
				return err
			},
			wantErr: true, want: "absent"},
		{name: "a lost drop does nothing", fault: fake.Fault{Method: "EnsureNodePool", Drop: true, Lost: true}, pool: true,
			call: func(t *testing.T, f *fake.Fake) error {
				_, err := f.EnsureNodePool(t.Context(), acct, ref, spec)
				return err
			},
			wantErr: true, want: "absent"},
		{name: "a create that vanishes answers its object, then is gone", fault: fake.Fault{Method: "EnsureCluster", Vanish: true},
			call: func(t *testing.T, f *fake.Fake) error {
				_, err := f.EnsureCluster(t.Context(), acct, clusterSpec("c"))
				return err
			},
			want: "absent"},
		{name: "a throttled delete whose cluster someone else removed", fault: fake.Fault{Method: "DeleteCluster", Class: providers.Throttled, SideEffect: providers.None, Vanish: true}, made: true,
			call:    func(t *testing.T, f *fake.Fake) error { _, err := f.DeleteCluster(t.Context(), acct, ref); return err },
			wantErr: true, want: "absent"},
		{name: "a create whose work fails", fault: fake.Fault{Method: "EnsureCluster", WorkFails: true},
			call: func(t *testing.T, f *fake.Fake) error {
				_, err := f.EnsureCluster(t.Context(), acct, clusterSpec("c"))
				return err
			},
			want: string(providers.ClusterError)},
		{name: "a delete whose work fails leaves the cluster running", fault: fake.Fault{Method: "DeleteCluster", WorkFails: true}, made: true,
			call: func(t *testing.T, f *fake.Fake) error { _, err := f.DeleteCluster(t.Context(), acct, ref); return err },
			want: string(providers.ClusterRunning)},
		{name: "a node pool create whose work fails", fault: fake.Fault{Method: "EnsureNodePool", WorkFails: true}, pool: true,
			call: func(t *testing.T, f *fake.Fake) error {
				_, err := f.EnsureNodePool(t.Context(), acct, ref, spec)
				return err
			},
			want: string(providers.NodePoolError)},
		{name: "a resize whose pool vanishes", fault: fake.Fault{Method: "ResizeNodePool", Vanish: true}, pool: true, made: true,
			call: func(t *testing.T, f *fake.Fake) error {
				_, err := f.ResizeNodePool(t.Context(), acct, ref, "p", providers.Size{NodeCount: 3})
				return err
			},
			want: "absent"},
		{name: "a node pool delete whose work fails leaves it running", fault: fake.Fault{Method: "DeleteNodePool", WorkFails: true}, pool: true, made: true,
			call: func(t *testing.T, f *fake.Fake) error {
				_, err := f.DeleteNodePool(t.Context(), acct, ref, "p")
				return err
			},
			want: string(providers.NodePoolRunning)},
		{name: "a throttled node pool delete whose pool someone else removed", fault: fake.Fault{Method: "DeleteNodePool", Class: providers.Throttled, SideEffect: providers.None, Vanish: true}, pool: true, made: true,
			call: func(t *testing.T, f *fake.Fake) error {
				_, err := f.DeleteNodePool(t.Context(), acct, ref, "p")
				return err
			},
			wantErr: true, want: "absent"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := config(t)
			cfg.Steps = fake.Steps{}
			f := open(t, cfg, clock.NewFake(epoch))
			if tc.pool || tc.made {
				ensure(t, f, "c")
			}
			if tc.pool && tc.made {
				if _, err := f.EnsureNodePool(t.Context(), acct, ref, spec); err != nil {
					t.Fatal(err)
				}
			}
			if err := f.InjectFault(tc.fault); err != nil {
				t.Fatal(err)
			}
			if err := tc.call(t, f); (err != nil) != tc.wantErr {
				t.Fatalf("the call answered %v; want an error: %v", err, tc.wantErr)
			}
			got := getCluster(t, f)
			if tc.pool {
				got = getPool(t, f)
			}
			if got != tc.want {
				t.Errorf("after the call the object is %s, want %s", got, tc.want)
			}
		})
	}
}

// TestFaultAfter: a fault with after lets that many calls through, then
// fires.
func TestFaultAfter(t *testing.T) {
	cfg := config(t)
	cfg.Steps = fake.Steps{}
	f := open(t, cfg, clock.NewFake(epoch))
	ensure(t, f, "c")
	ref := providers.ClusterRef{Location: "fake-east", Name: "c"}
	if err := f.InjectFault(fake.Fault{Method: "GetCluster", After: 2, Class: providers.Unavailable, SideEffect: providers.None}); err != nil {
		t.Fatal(err)
	}
	var got []bool
	for range 4 {
		_, err := f.GetCluster(t.Context(), acct, ref)
		got = append(got, err != nil)
	}
	if want := []bool{false, false, true, false}; !equalBools(got, want) {
		t.Errorf("failed calls %v, want %v", got, want)
	}
	for _, bad := range []fake.Fault{
		{Method: "GetCluster", Vanish: true},
		{Method: "EnsureCluster", Vanish: true, WorkFails: true},
		{Method: "EnsureCluster", Lost: true},
		{Method: "GetCluster", After: -1, Drop: true},
	} {
		if err := f.InjectFault(bad); err == nil {
			t.Errorf("fault %+v accepted", bad)
		}
	}
}

func equalBools(a, b []bool) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
