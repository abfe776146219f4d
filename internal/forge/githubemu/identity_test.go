package githubemu

import (
	"crypto/rand"
	"crypto/rsa"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/google/go-github/v62/github"
)

// GET /user answers the token's login; an installation token is not a user
// and gets GitHub's 403.
func TestUserIsTheTokensLogin(t *testing.T) {
	s, _, c, _ := setup(t, Options{})
	u, _, err := c.Users.Get(t.Context(), "")
	if err != nil || u.GetLogin() != "fleet-bot" || u.GetType() != "User" {
		t.Fatalf("GET /user: %+v %v", u, err)
	}
	if _, _, err := client(t, s, "unknown").Users.Get(t.Context(), ""); !isStatus(err, http.StatusUnauthorized) {
		t.Errorf("GET /user with a bad token: %v", err)
	}
	// An installation token (Actions' GITHUB_TOKEN, say) is not a user.
	s.AddInstallationToken("ghs_actions", "github-actions")
	if _, _, err := client(t, s, "ghs_actions").Users.Get(t.Context(), ""); !isStatus(err, http.StatusForbidden) {
		t.Errorf("GET /user with an installation token: %v", err)
	}
	if got := s.Counters().Counted; got != 2 {
		t.Errorf("GET /user counted %d times, want 2 (the good token's, the 403)", got)
	}
}

// GET /app with the app's JWT answers its slug; the installation token's
// comments are authored by <slug>[bot], a Bot.
func TestAppSlugAndBotAuthor(t *testing.T) {
	s, repo, _, clk := setup(t, Options{})
	n := repo.OpenPR(PR{HeadSHA: sha(1)})
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	other, _ := rsa.GenerateKey(rand.Reader, 2048)
	s.AddAppWithSlug("4242", "acme-fleet", 77, &key.PublicKey)
	s.AddApp("5151", 88, &other.PublicKey) // default slug
	ctx := t.Context()
	now := clk.Now()
	jwt := signJWT(t, key, "4242", now.Add(-time.Minute), now.Add(9*time.Minute))

	app, _, err := client(t, s, jwt).Apps.Get(ctx, "")
	if err != nil || app.GetSlug() != "acme-fleet" || app.GetID() != 4242 {
		t.Fatalf("GET /app: %+v %v", app, err)
	}
	app, _, err = client(t, s, signJWT(t, other, "5151", now.Add(-time.Minute), now.Add(9*time.Minute))).Apps.Get(ctx, "")
	if err != nil || app.GetSlug() != "fleet-agent" {
		t.Fatalf("GET /app, default slug: %+v %v", app, err)
	}
	bad := signJWT(t, other, "4242", now.Add(-time.Minute), now.Add(9*time.Minute))
	if _, _, err := client(t, s, bad).Apps.Get(ctx, ""); !isStatus(err, http.StatusUnauthorized) {
		t.Errorf("GET /app with a JWT of the wrong key: %v", err)
	}
	if _, _, err := client(t, s, "good-token").Apps.Get(ctx, ""); !isStatus(err, http.StatusUnauthorized) {
		t.Errorf("GET /app with a token, not a JWT: %v", err)
	}
	if s.Counters().Counted != 0 {
		t.Error("JWT requests spent the installation's budget")
	}

	tok, _, err := client(t, s, jwt).Apps.CreateInstallationToken(ctx, 77, nil)
	if err != nil {
		t.Fatal(err)
	}
	c := client(t, s, tok.GetToken())
	made, _, err := c.Issues.CreateComment(ctx, "acme", "fleet", n, &github.IssueComment{Body: github.String("hi")})
	if err != nil || made.GetUser().GetLogin() != "acme-fleet[bot]" || made.GetUser().GetType() != "Bot" {
		t.Fatalf("comment as the app: %+v %v", made.GetUser(), err)
	}
	if cs := repo.Comments(n); len(cs) != 1 || cs[0].User != "acme-fleet[bot]" {
		t.Errorf("stored comments %+v", cs)
	}
	// An installation token is not a user.
	if _, _, err := c.Users.Get(ctx, ""); !isStatus(err, http.StatusForbidden) {
		t.Errorf("GET /user with an installation token: %v", err)
	}
}

func isStatus(err error, status int) bool {
	var ge *github.ErrorResponse
	return errors.As(err, &ge) && ge.Response != nil && ge.Response.StatusCode == status
}
