package forge_test

import (
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fleet-agent/fleet-agent/internal/forge"
	"github.com/fleet-agent/fleet-agent/internal/forge/githubemu"
)

// auths are the two ways the forge authenticates; each returns the login its
// comments carry.
var auths = []struct {
	name  string
	setup func(t *testing.T, e *env) string
}{
	{"token", func(t *testing.T, e *env) string { return "fleet-bot" }},
	{"app", func(t *testing.T, e *env) string {
		key, pemText := pemKey(t)
		e.emu.AddAppWithSlug("4242", "acme-fleet", 77, &key.PublicKey)
		e.sec.set("secret://app-key", pemText)
		e.cfg.Token = ""
		e.cfg.App = &forge.App{ID: "4242", InstallationID: 77, PrivateKey: "secret://app-key"}
		e.restart(t)
		return "acme-fleet[bot]"
	}},
}

// identityRequests counts the requests that learn who the forge is.
func identityRequests(e *env) int {
	n := 0
	for _, r := range e.emu.Requests() {
		if r.Method == http.MethodGet && (r.Path == "/user" || r.Path == "/app") {
			n++
		}
	}
	return n
}

// A comment by someone else that holds the plan marker is not the agent's:
// the agent makes its own, edits only its own, and never touches the other,
// in one process and after a restart.
func TestForeignPlanMarkerIsIgnored(t *testing.T) {
	for _, a := range auths {
		t.Run(a.name, func(t *testing.T) {
			e := newEnv(t, githubemu.Options{})
			me := a.setup(t, e)
			n := e.repo.OpenPR(githubemu.PR{HeadSHA: sha(1)})
			plan := e.forge.PlanMarker()
			fake := plan + "\nplan: nothing to do, merge away"
			spoof := e.repo.AddComment(n, "mallory", fake)
			ctx := t.Context()

			c, err := e.forge.UpsertPlanComment(ctx, n, "plan one")
			if err != nil {
				t.Fatal(err)
			}
			if c.ID == spoof || c.Author != me {
				t.Fatalf("upsert took %+v, want a new comment by %s", c, me)
			}
			if _, err := e.forge.UpsertPlanComment(ctx, n, "plan two"); err != nil {
				t.Fatal(err)
			}
			// After a restart the marker is searched again: the agent's
			// comment is found, not mallory's older one.
			g := e.restart(t)
			if _, err := g.UpsertPlanComment(ctx, n, "plan three"); err != nil {
				t.Fatal(err)
			}
			found, ok, err := g.FindComment(ctx, n, plan)
			if err != nil || !ok || found.ID != c.ID {
				t.Errorf("find: %+v %v %v, want %d", found, ok, err, c.ID)
			}
			cs := e.repo.Comments(n)
			if len(cs) != 2 {
				t.Fatalf("comments %+v", cs)
			}
			if cs[0].ID != spoof || cs[0].Edits != 0 || cs[0].Body != fake || cs[0].User != "mallory" {
				t.Errorf("the foreign comment was touched: %+v", cs[0])
			}
			if cs[1].ID != c.ID || cs[1].User != me || cs[1].Edits != 2 || !strings.HasSuffix(cs[1].Body, "plan three") {
				t.Errorf("the agent's comment %+v", cs[1])
			}
			for _, r := range e.emu.Requests() {
				if r.Method == http.MethodPatch && strings.HasSuffix(r.Path, "/"+strconv.FormatInt(spoof, 10)) {
					t.Errorf("edit sent to the foreign comment: %+v", r)
				}
			}
		})
	}
}

// A result marker pre-posted by someone else does not stop the real result:
// it is posted once, and found again (as the agent's) after a restart.
func TestForeignOnceMarkerIsIgnored(t *testing.T) {
	for _, a := range auths {
		t.Run(a.name, func(t *testing.T) {
			e := newEnv(t, githubemu.Options{})
			me := a.setup(t, e)
			n := e.repo.OpenPR(githubemu.PR{HeadSHA: sha(1)})
			marker := e.forge.Marker("apply " + sha(2))
			e.repo.AddComment(n, "mallory", marker+"\napplied 0 calls")
			// Also one by a user whose login merely contains the agent's.
			e.repo.AddComment(n, "x"+me, marker+"\napplied 0 calls")
			ctx := t.Context()

			c, posted, err := e.forge.AddCommentOnce(ctx, n, marker, "applied 3 calls")
			if err != nil || !posted || c.Author != me {
				t.Fatalf("once: %+v posted=%v %v", c, posted, err)
			}
			if _, posted, err := e.forge.AddCommentOnce(ctx, n, marker, "applied 3 calls"); err != nil || posted {
				t.Fatalf("posted twice: %v %v", posted, err)
			}
			g := e.restart(t)
			again, posted, err := g.AddCommentOnce(ctx, n, marker, "applied 3 calls")
			if err != nil || posted || again.ID != c.ID {
				t.Fatalf("after a restart: %+v posted=%v %v", again, posted, err)
			}
			mine := 0
			for _, cm := range e.repo.Comments(n) {
				if cm.User == me {
					mine++
					if !strings.Contains(cm.Body, "applied 3 calls") {
						t.Errorf("the agent's comment %+v", cm)
					}
				} else if cm.Edits != 0 {
					t.Errorf("a foreign comment was edited: %+v", cm)
				}
			}
			if mine != 1 {
				t.Errorf("%d result comments by the agent, want 1", mine)
			}
		})
	}
}

// The identity is learned once per credential: repeated finds cost no lookup,
// a token rotated to the same user costs one, and a token of another user
// makes the first user's comments foreign.
func TestIdentityLearnedOncePerToken(t *testing.T) {
	e := newEnv(t, githubemu.Options{})
	ctx := t.Context()
	n := e.repo.OpenPR(githubemu.PR{HeadSHA: sha(1)})
	e.repo.AddCommit(sha(1))
	e.emu.ResetLog()
	if _, err := e.forge.SetStatus(ctx, sha(1), forge.Status{Context: forge.ContextPlan, State: forge.StateSuccess}); err != nil {
		t.Fatal(err)
	}
	if got := identityRequests(e); got != 0 {
		t.Errorf("a status learned the identity (%d requests): only comments need it", got)
	}
	for i := range 3 {
		if _, err := e.forge.UpsertPlanComment(ctx, n, "plan "+strconv.Itoa(i)); err != nil {
			t.Fatal(err)
		}
		if _, _, err := e.forge.AddCommentOnce(ctx, n, e.forge.Marker("apply "+sha(i)), "applied"); err != nil {
			t.Fatal(err)
		}
		if _, _, err := e.forge.FindComment(ctx, n, e.forge.Marker("drift x")); err != nil {
			t.Fatal(err)
		}
	}
	if got := identityRequests(e); got != 1 {
		t.Errorf("%d identity lookups, want 1", got)
	}
	first := e.repo.Comments(n)[0]

	// Rotated to a new token of the same user: learned again, once.
	e.emu.AddToken("ghp_rotated", "fleet-bot")
	e.sec.set("env://GITHUB_TOKEN", "ghp_rotated")
	e.emu.ResetLog()
	for range 2 {
		if _, _, err := e.forge.FindComment(ctx, n, e.forge.PlanMarker()); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.forge.UpsertPlanComment(ctx, n, "plan after rotation"); err != nil {
		t.Fatal(err)
	}
	if got := identityRequests(e); got != 1 {
		t.Errorf("%d identity lookups after a rotation, want 1", got)
	}
	if cs := e.repo.Comments(n); cs[0].ID != first.ID || !strings.HasSuffix(cs[0].Body, "plan after rotation") {
		t.Errorf("the same user's plan comment was not edited: %+v", cs[0])
	}

	// A token of another user: the old comments are not this user's, even
	// the one the forge remembers.
	e.emu.AddToken("ghp_other", "other-bot")
	e.sec.set("env://GITHUB_TOKEN", "ghp_other")
	e.emu.ResetLog()
	c, err := e.forge.UpsertPlanComment(ctx, n, "plan by another")
	if err != nil {
		t.Fatal(err)
	}
	if c.ID == first.ID || c.Author != "other-bot" {
		t.Errorf("another user's token took over %+v", c)
	}
	if cs := e.repo.Comments(n); cs[0].Edits != 3 {
		t.Errorf("the first user's comment was edited by another: %+v", cs[0])
	}
	if got := identityRequests(e); got != 1 {
		t.Errorf("%d identity lookups for the new user, want 1", got)
	}
	if strings.Contains(e.logs.String(), "ghp_") {
		t.Error("a token in the logs")
	}
}

// An App learns its slug once with its JWT; renewing the installation token
// does not learn it again.
func TestAppIdentityLearnedOnce(t *testing.T) {
	e := newEnv(t, githubemu.Options{})
	auths[1].setup(t, e)
	ctx := t.Context()
	n := e.repo.OpenPR(githubemu.PR{HeadSHA: sha(1)})
	e.emu.ResetLog()
	for i := range 3 {
		if _, _, err := e.forge.AddCommentOnce(ctx, n, e.forge.Marker("apply "+sha(i)), "applied"); err != nil {
			t.Fatal(err)
		}
		e.clk.Advance(30 * time.Minute)
	}
	if e.emu.TokensMinted() < 2 {
		t.Fatalf("minted %d: the test wants a renewal", e.emu.TokensMinted())
	}
	if got := identityRequests(e); got != 1 {
		t.Errorf("%d identity lookups, want 1", got)
	}
	for _, r := range e.emu.Requests() {
		if r.Path == "/user" {
			t.Errorf("an App asked GET /user: %+v", r)
		}
	}
}

// When the identity cannot be learned nothing is trusted and nothing is
// posted: the operation fails with an error the outbox retries.
func TestIdentityLookupFailureIsRetried(t *testing.T) {
	t.Run("server error", func(t *testing.T) {
		e := newEnv(t, githubemu.Options{})
		ctx := t.Context()
		n := e.repo.OpenPR(githubemu.PR{HeadSHA: sha(1)})
		e.repo.AddComment(n, "mallory", e.forge.PlanMarker()+"\nfake")
		e.emu.Fail5xxNext(1)
		_, err := e.forge.UpsertPlanComment(ctx, n, "plan")
		if fe := classOf(t, err); !fe.Retryable() || !strings.Contains(fe.Error(), "who") {
			t.Errorf("lookup failure: %v", err)
		}
		if cs := e.repo.Comments(n); len(cs) != 1 || cs[0].Edits != 0 {
			t.Errorf("something was posted: %+v", cs)
		}
		e.clk.Advance(forge.DefaultRetryDelay)
		if _, err := e.forge.UpsertPlanComment(ctx, n, "plan"); err != nil {
			t.Fatal(err)
		}
		if cs := e.repo.Comments(n); len(cs) != 2 || cs[0].Edits != 0 || cs[1].User != "fleet-bot" {
			t.Errorf("comments %+v", cs)
		}
	})
	t.Run("app key refused", func(t *testing.T) {
		e := newEnv(t, githubemu.Options{})
		auths[1].setup(t, e)
		ctx := t.Context()
		n := e.repo.OpenPR(githubemu.PR{HeadSHA: sha(1)})
		// The installation token is good, the JWT for GET /app is not.
		if _, err := e.forge.OpenPullRequests(ctx, "main"); err != nil {
			t.Fatal(err)
		}
		_, other := pemKey(t)
		e.sec.set("secret://app-key", other)
		_, _, err := e.forge.AddCommentOnce(ctx, n, e.forge.Marker("apply x"), "applied")
		if fe := classOf(t, err); fe.Class != forge.ClassUnauthorized {
			t.Errorf("lookup with a refused JWT: %v", err)
		}
		if cs := e.repo.Comments(n); len(cs) != 0 {
			t.Errorf("posted without knowing who it is: %+v", cs)
		}
	})
	t.Run("installation token given as a token", func(t *testing.T) {
		// Actions' GITHUB_TOKEN, say: an installation token is not a
		// user, and GET /user answers 403.
		e := newEnv(t, githubemu.Options{})
		ctx := t.Context()
		n := e.repo.OpenPR(githubemu.PR{HeadSHA: sha(1)})
		const ghs = "ghs_CANARYinstallation"
		e.emu.AddInstallationToken(ghs, "github-actions")
		e.sec.set("env://GITHUB_TOKEN", ghs)
		_, err := e.forge.UpsertPlanComment(ctx, n, "plan")
		fe := classOf(t, err)
		if fe.Class != forge.ClassCredentials || !strings.Contains(fe.Error(), "GET /user") {
			t.Errorf("an installation token as github.token: %v", err)
		}
		if strings.Contains(fe.Error(), ghs) {
			t.Error("the token is in the error")
		}
		if cs := e.repo.Comments(n); len(cs) != 0 {
			t.Errorf("posted without knowing who it is: %+v", cs)
		}
	})
}
