package fake_test

import (
	"strings"
	"testing"

	"github.com/fleet-agent/fleet-agent/internal/clock"
	"github.com/fleet-agent/fleet-agent/internal/providers"
	"github.com/fleet-agent/fleet-agent/internal/providers/fake"
)

// TestNames: what a second create of a name in use does under each value
// of `names`, and what a read by name then answers.
func TestNames(t *testing.T) {
	byName := providers.ClusterRef{Location: "fake-east", Name: "twice"}
	cases := []struct {
		names fake.Names
		// secondErr is the class the second create answers ("" success);
		// clusters is how many of the name the account then holds.
		secondErr providers.Class
		reason    string
		clusters  int
		// readErr is the class a read by Location+Name answers.
		readErr providers.Class
	}{
		{names: "", clusters: 1},
		{names: fake.NamesConverge, clusters: 1},
		{names: fake.NamesDuplicate, clusters: 2, readErr: providers.Conflict},
		{names: fake.NamesConflict, secondErr: providers.Conflict, reason: "alreadyExists", clusters: 1},
	}
	for _, tc := range cases {
		t.Run(string(tc.names)+"_", func(t *testing.T) {
			ctx := t.Context()
			cfg := config(t)
			cfg.Names = tc.names
			f := open(t, cfg, clock.NewFake(epoch))
			first, err := f.EnsureCluster(ctx, acct, clusterSpec("twice"))
			if err != nil {
				t.Fatalf("first create: %v", err)
			}
			second, err := f.EnsureCluster(ctx, acct, clusterSpec("twice"))
			if got := providers.ClassOf(err); got != tc.secondErr {
				t.Fatalf("second create: %v (class %q), want class %q", err, got, tc.secondErr)
			}
			if tc.reason != "" {
				if got := providers.ReasonOf(err); got != tc.reason || !strings.Contains(err.Error(), "already exists") || !strings.Contains(err.Error(), first.Ref.ID) {
					t.Errorf("second create: %v (reason %q), want reason %q naming %s", err, got, tc.reason, first.Ref.ID)
				}
			}
			var ids []string
			for _, c := range f.Snapshot().Clusters {
				if c.Name == "twice" {
					ids = append(ids, c.ID)
				}
			}
			if len(ids) != tc.clusters {
				t.Fatalf("the account holds %d clusters named twice (%v), want %d", len(ids), ids, tc.clusters)
			}
			if tc.secondErr == "" && tc.clusters == 1 && second.Ref.ID != first.Ref.ID {
				t.Errorf("converged create answered id %s, want %s", second.Ref.ID, first.Ref.ID)
			}
			got, err := f.GetCluster(ctx, acct, byName)
			if cl := providers.ClassOf(err); cl != tc.readErr {
				t.Fatalf("read by name: %v (class %q), want class %q", err, cl, tc.readErr)
			}
			if tc.readErr == "" {
				if got.Ref.ID != first.Ref.ID {
					t.Errorf("read by name found %s, want the first, %s", got.Ref.ID, first.Ref.ID)
				}
				return
			}
			// Two of one name: the Conflict names both, every call that
			// takes the name alone refuses, and each is still reached by id.
			for _, id := range ids {
				if !strings.Contains(err.Error(), id) {
					t.Errorf("conflict %q does not name %s", err, id)
				}
				if c, err := f.GetCluster(ctx, acct, providers.ClusterRef{ID: id}); err != nil || c.Ref.ID != id {
					t.Errorf("read by id %s: %+v, %v", id, c.Ref, err)
				}
			}
			if second.Ref.ID == first.Ref.ID || second.Ref.ID == "" {
				t.Errorf("second create answered id %q, want a new one", second.Ref.ID)
			}
			if _, err := f.DeleteCluster(ctx, acct, byName); providers.ClassOf(err) != providers.Conflict {
				t.Errorf("delete by name of two clusters: %v, want a Conflict", err)
			}
			if _, err := f.ListNodePools(ctx, acct, byName); providers.ClassOf(err) != providers.Conflict {
				t.Errorf("node pools by a name two clusters carry: %v, want a Conflict", err)
			}
			// Once one is gone the name is unique again.
			if _, err := f.DeleteCluster(ctx, acct, second.Ref); err != nil {
				t.Fatal(err)
			}
			runUntilGone(t, f, second.Ref)
			if c, err := f.GetCluster(ctx, acct, byName); err != nil || c.Ref.ID != first.Ref.ID {
				t.Errorf("read by name after the duplicate went: %+v, %v", c.Ref, err)
			}
		})
	}
}

// runUntilGone reads a cluster until it is NotFound; it fails after 20
// reads.
func runUntilGone(t *testing.T, f *fake.Fake, ref providers.ClusterRef) {
	t.Helper()
	for range 20 {
		_, err := f.GetCluster(t.Context(), acct, ref)
		if providers.ClassOf(err) == providers.NotFound {
			return
		}
		if err != nil {
			t.Fatalf("GetCluster %s: %v", ref, err)
		}
	}
	t.Fatalf("cluster %s still there after 20 reads", ref)
}
