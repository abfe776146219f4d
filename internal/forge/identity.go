package forge

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"strings"
	"sync"

	"github.com/google/go-github/v62/github"
)

// identity is who the forge's comments are written by: only comments of
// that login are the agent's. Anyone who can comment on a pull request can
// write a marker, so a marker alone proves nothing.
//
// It is learned once per credential and kept: with a token, GET /user (its
// login); with a GitHub App, GET /app with the app's JWT (its slug: the
// installation's comments are written by the bot user "<slug>[bot]", as
// GitHub names an App's bot). An App's identity does not change with its
// installation tokens, so it is learned once per process. A token's is kept
// with a keyed hash of the token it was learned with (never the token):
// when the token resolves to another value (a rotation) it is learned again.
type identity struct {
	mu    sync.Mutex
	salt  [32]byte
	login string
	// of is the keyed hash of the token the login belongs to (token auth).
	of    [sha256.Size]byte
	known bool
}

func (id *identity) init() {
	if _, err := rand.Read(id.salt[:]); err != nil {
		panic(err) // crypto/rand does not fail
	}
}

func (id *identity) fingerprint(token string) [sha256.Size]byte {
	m := hmac.New(sha256.New, id.salt[:])
	m.Write([]byte(token))
	var out [sha256.Size]byte
	copy(out[:], m.Sum(nil))
	return out
}

// credKey carries a resolved token in a request's context, so that the
// login learned with GET /user is that of the token it is kept with.
type credKey struct{}

// self returns the login of the credential in use, learning it when it is not
// known for this credential. It never guesses: when GitHub does not say, the
// error is retryable (a rate limit, 5xx, the network), a credential failure
// (401, a secret that does not resolve), or ClassCredentials with advice
// (403/404: a token that cannot read who it is); the outbox retries all of
// them (the last two a bounded number of times), and nothing is posted
// meanwhile.
func (g *GitHub) self(ctx context.Context) (string, error) {
	id := &g.ident
	if g.app != nil {
		id.mu.Lock()
		defer id.mu.Unlock()
		if id.known {
			return id.login, nil
		}
		login, err := g.app.botLogin(ctx)
		if err != nil {
			return "", err
		}
		id.login, id.known = login, true
		g.log.Debug("github identity learned", "login", login)
		return login, nil
	}
	tok, err := g.resolve(ctx, g.cfg.Token, "github.token")
	if err != nil {
		return "", err
	}
	fp := id.fingerprint(tok)
	id.mu.Lock()
	defer id.mu.Unlock()
	if id.known && hmac.Equal(id.of[:], fp[:]) {
		return id.login, nil
	}
	op := "learn who github.token is (GET /user)"
	var login string
	_, err = g.call(ctx, op, func(ctx context.Context) (*github.Response, error) {
		u, resp, err := g.client.Users.Get(context.WithValue(ctx, credKey{}, tok), "")
		login = u.GetLogin()
		return resp, err
	})
	if err != nil {
		return "", identityError(err, "a token that is not a user's (an installation token, Actions' GITHUB_TOKEN) cannot say who it is: use github.app for an App, or a user's or machine user's token")
	}
	if login == "" {
		return "", &Error{Class: ClassUnexpected, Op: op, Message: "GitHub named no login"}
	}
	id.login, id.of, id.known = login, fp, true
	g.log.Debug("github identity learned", "login", login)
	return login, nil
}

// botLogin asks GitHub, with the app's JWT, for the App's slug: its bot
// user is "<slug>[bot]".
func (a *appAuth) botLogin(ctx context.Context) (string, error) {
	op := "learn which App github.app is (GET /app)"
	app, resp, err := a.client.Apps.Get(ctx, "")
	if err != nil {
		return "", identityError(a.g.classify(ctx, op, resp, err), "check github.app.id and its private key")
	}
	if app.GetSlug() == "" {
		return "", &Error{Class: ClassUnexpected, Op: op, Status: resp.StatusCode, Message: "GitHub named no slug"}
	}
	return app.GetSlug() + "[bot]", nil
}

// identityError keeps the errors that pass with time or with the credential
// as they are, and makes the others (403, 404, anything a retry would meet
// again) a credential failure: without an identity no comment can be found,
// and dropping the post at once would lose it for a setting someone can fix.
func identityError(err error, advice string) error {
	var fe *Error
	if !errors.As(err, &fe) {
		return err
	}
	if fe.Retryable() || fe.Class == ClassUnauthorized || fe.Class == ClassCredentials {
		return fe
	}
	e := *fe
	e.Class = ClassCredentials
	e.Message = fe.Message + "; comments are told apart by their author, so the forge must know who it is: " + advice
	return &e
}

// isSelf reports whether a comment's author is the agent (logins are
// case-insensitive on GitHub).
func isSelf(author, me string) bool {
	return me != "" && strings.EqualFold(author, me)
}
