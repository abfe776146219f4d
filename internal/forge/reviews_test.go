package forge_test

import (
	"slices"
	"testing"

	"github.com/fleet-agent/fleet-agent/internal/forge/githubemu"
)

// TestApprovals: only a login's latest verdict counts, and only an approval
// of the head asked about.
func TestApprovals(t *testing.T) {
	e := newEnv(t, githubemu.Options{})
	n := e.repo.OpenPR(githubemu.PR{HeadSHA: sha(2), User: "bob"})
	for _, rv := range []githubemu.Review{
		{User: "alice", State: "APPROVED"},
		{User: "Carol", State: "APPROVED"},
		{User: "carol", State: "COMMENTED"}, // leaves carol's approval standing
		{User: "dave", State: "APPROVED"},
		{User: "dave", State: "CHANGES_REQUESTED"},
		{User: "erin", State: "APPROVED", CommitID: sha(1)}, // an older head
		{User: "frank", State: "CHANGES_REQUESTED"},
		{User: "frank", State: "APPROVED"},
	} {
		e.repo.SubmitReview(n, rv)
	}
	got, err := e.forge.Approvals(t.Context(), n, sha(2))
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"alice", "carol", "frank"}; !slices.Equal(got, want) {
		t.Errorf("approvals %v, want %v", got, want)
	}
	if _, err := e.forge.Approvals(t.Context(), 99, sha(2)); err == nil {
		t.Error("reviews of a pull request that does not exist")
	}
}

// TestTeamMember: a member is yes, anyone else (a 404) is no.
func TestTeamMember(t *testing.T) {
	e := newEnv(t, githubemu.Options{})
	e.emu.AddTeamMember("acme", "capacity", "carol")
	for _, c := range []struct {
		org, team, login string
		want             bool
	}{
		{"acme", "capacity", "carol", true},
		{"acme", "capacity", "Carol", true},
		{"acme", "capacity", "mallory", false},
		{"acme", "platform", "carol", false},
	} {
		got, err := e.forge.TeamMember(t.Context(), c.org, c.team, c.login)
		if err != nil || got != c.want {
			t.Errorf("%s/%s %s: %v %v, want %v", c.org, c.team, c.login, got, err, c.want)
		}
	}
}
