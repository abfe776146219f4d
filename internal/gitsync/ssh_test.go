package gitsync

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"os"
	"path/filepath"
	"testing"

	"github.com/fleet-agent/fleet-agent/internal/refusal"
	"github.com/fleet-agent/fleet-agent/internal/testutil/gitserver"
	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
)

func TestSSHRemote(t *testing.T) {
	srv := gitserver.Start(t)
	remo := srv.NewRepo(t, "fleet")
	work := remo.Clone(t)
	work.Write(t, "fleet.json", `{"ssh":true}`)
	tip := work.CommitAll(t, "over ssh")
	work.Push(t, "main")
	sshd := gitserver.StartSSH(t, srv.Root)

	_, otherHostKey, _ := ed25519.GenerateKey(rand.Reader)
	otherSigner, _ := ssh.NewSignerFromKey(otherHostKey)
	_, strangerKey, _ := ed25519.GenerateKey(rand.Reader)
	block, _ := ssh.MarshalPrivateKey(strangerKey, "")
	strangerPEM := string(pem.EncodeToMemory(block))

	dir := t.TempDir()
	writeKnown := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := writeKnown("good", sshd.KnownHostsLine()+"\n")
	empty := writeKnown("empty", "")
	changed := writeKnown("changed", knownhosts.Line([]string{knownhosts.Normalize(sshd.Addr)}, otherSigner.PublicKey())+"\n")

	for _, tc := range []struct {
		name     string
		known    string
		key      string
		sentinel error
	}{
		{"known host", good, string(sshd.ClientKeyPEM), nil},
		{"unknown host is refused, not learned", empty, string(sshd.ClientKeyPEM), ErrHostKey},
		{"changed host key", changed, string(sshd.ClientKeyPEM), ErrHostKey},
		{"key not authorized", good, strangerPEM, ErrAuth},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := Open(Config{
				URL:     sshd.URL("fleet"),
				Dir:     t.TempDir(),
				Auth:    Auth{SSHKey: "secret://deploy-key", KnownHosts: tc.known},
				Secrets: mapResolver{"secret://deploy-key": tc.key},
			})
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			s, err := r.Poll(t.Context())
			if tc.sentinel == nil {
				if err != nil || s.Tip != tip {
					t.Fatalf("Poll over ssh = %+v, %v; want tip %s", s, err, tip)
				}
				if got, err := r.ReadFile(tip, "fleet.json"); err != nil || string(got) != `{"ssh":true}` {
					t.Fatalf("ReadFile = %q, %v", got, err)
				}
				return
			}
			wantErr(t, err, tc.sentinel, refusal.InvalidState)
			if known, _ := os.ReadFile(tc.known); tc.known == empty && len(known) != 0 {
				t.Fatal("the unknown host was written to knownHosts")
			}
		})
	}
}
