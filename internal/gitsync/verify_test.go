package gitsync

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ProtonMail/go-crypto/openpgp"
	"github.com/ProtonMail/go-crypto/openpgp/armor"
	"github.com/ProtonMail/go-crypto/openpgp/packet"
	"github.com/fleet-agent/fleet-agent/internal/clock"
	"github.com/fleet-agent/fleet-agent/internal/refusal"
	"github.com/fleet-agent/fleet-agent/internal/testutil/gitserver"
	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing/object"
)

func newKey(t *testing.T, name string) *openpgp.Entity {
	t.Helper()
	e, err := openpgp.NewEntity(name, "", strings.ToLower(name)+"@example.com", &packet.Config{Algorithm: packet.PubKeyAlgoEdDSA})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func armoredPublic(t *testing.T, e *openpgp.Entity) []byte {
	t.Helper()
	var buf bytes.Buffer
	w, err := armor.Encode(&buf, openpgp.PublicKeyType, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Serialize(w); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	buf.WriteByte('\n')
	return buf.Bytes()
}

// signedCommit commits a file in the working copy with go-git, signed by
// key (unsigned when key is nil).
func signedCommit(t *testing.T, w *gitserver.Work, key *openpgp.Entity, content string) string {
	t.Helper()
	w.Write(t, "fleet.json", content)
	repo, err := git.PlainOpen(w.Dir)
	if err != nil {
		t.Fatal(err)
	}
	wt, err := repo.Worktree()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := wt.Add("fleet.json"); err != nil {
		t.Fatal(err)
	}
	who := &object.Signature{Name: "Signer", Email: "signer@example.com", When: time.Unix(1767225600, 0)}
	h, err := wt.Commit("change "+content, &git.CommitOptions{Author: who, Committer: who, SignKey: key})
	if err != nil {
		t.Fatal(err)
	}
	return h.String()
}

func TestSignatures(t *testing.T) {
	e := newEnv(t)
	// Signatures are made now, on the wall clock; verification must not
	// see them as made in the future.
	e.clk = clock.NewFake(time.Now().Add(time.Hour))
	e.cfg.Clock = e.clk
	trusted, other := newKey(t, "Trusted"), newKey(t, "Other")
	keyring := filepath.Join(t.TempDir(), "trusted.asc")
	if err := os.WriteFile(keyring, armoredPublic(t, trusted), 0o644); err != nil {
		t.Fatal(err)
	}
	e.cfg.KeyringPath = keyring

	good := signedCommit(t, e.work, trusted, `{"a":1}`)
	unsigned := signedCommit(t, e.work, nil, `{"a":2}`)
	byOther := signedCommit(t, e.work, other, `{"a":3}`)
	e.work.Push(t, "main")
	// The same signature over an altered commit: change the message and
	// store the object in the remote as a pull request head.
	raw := e.remo.Git(t, "cat-file", "commit", good)
	altered := gitserver.GitInput(t, e.remo.Dir, strings.NewReader(strings.Replace(raw, "change ", "chang3 ", 1)+"\n"), "hash-object", "-t", "commit", "-w", "--stdin")
	e.remo.UpdateRef(t, "refs/pull/9/head", altered)
	e.cfg.Want = Patterns("refs/pull/*/head")

	r := e.open(t)
	mustPoll(t, r)
	if info, _ := r.Commit(altered); !info.Signed || !strings.HasPrefix(info.Message, "chang3") {
		t.Fatalf("the altered commit is not what the test meant: %+v", info)
	}

	s, err := r.Verify(good)
	if err != nil {
		t.Fatalf("Verify(trusted) = %v", err)
	}
	if s.Identity != "Trusted <trusted@example.com>" || s.KeyID == "" || !strings.HasSuffix(s.Fingerprint, s.KeyID) {
		t.Fatalf("signer = %+v", s)
	}
	for _, tc := range []struct {
		name     string
		commit   string
		sentinel error
	}{
		{"unsigned", unsigned, ErrUnsigned},
		{"unknown key", byOther, ErrUnknownKey},
		{"bad signature", altered, ErrBadSignature},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := r.Verify(tc.commit)
			wantErr(t, err, tc.sentinel, refusal.InvalidState)
			if !strings.Contains(err.Error(), tc.commit) {
				t.Fatalf("error %q does not name the commit", err)
			}
		})
	}

	// The operator appends a key (GitHub's web-flow key, in real life): it
	// counts at the next verification, without reopening.
	f, err := os.OpenFile(keyring, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(armoredPublic(t, other)); err != nil {
		t.Fatal(err)
	}
	_ = f.Close()
	if s, err := r.Verify(byOther); err != nil || s.Identity != "Other <other@example.com>" {
		t.Fatalf("Verify after appending the key = %+v, %v", s, err)
	}
	if _, err := r.Verify(good); err != nil {
		t.Fatalf("the first key stopped counting after the append: %v", err)
	}

	// No keyring at all is a configuration error, not a verdict.
	e2 := newEnv(t)
	e2.commit(t, "x", map[string]string{"fleet.json": "{}"})
	e2.work.Push(t, "main")
	r2 := e2.open(t)
	tip := mustPoll(t, r2).Tip
	_, err = r2.Verify(tip)
	wantErr(t, err, ErrConfig, refusal.InvalidInput)
}
