package gitserver

import (
	"os/exec"
	"strings"
	"testing"
)

func lsRemote(t *testing.T, url string) (string, error) {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), "git", "ls-remote", url)
	cmd.Env = Env()
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func TestServerServesCountsAndSwitches(t *testing.T) {
	srv := Start(t)
	repo := srv.NewRepo(t, "fleet")
	w := repo.Clone(t)
	w.Write(t, "fleet.json", `{"version":1}`)
	sha := w.CommitAll(t, "first")
	w.Push(t, "main")
	repo.UpdateRef(t, "refs/pull/1/head", sha)

	out, err := lsRemote(t, srv.AuthURL(repo))
	if err != nil {
		t.Fatalf("ls-remote: %v\n%s", err, out)
	}
	if !strings.Contains(out, sha+"\trefs/heads/main") || !strings.Contains(out, sha+"\trefs/pull/1/head") {
		t.Fatalf("ls-remote does not list main and the pull ref at %s:\n%s", sha, out)
	}
	c := srv.Counts()
	if c.InfoRefs != 1 || c.UploadPack != 0 {
		t.Fatalf("counts after ls-remote = %+v, want one info/refs and no upload-pack", c)
	}

	// A push through the server crosses both traps of git http-backend behind net/http/cgi (chunked bodies, REMOTE_USER): a body over
	// 1 MiB is sent chunked, and receive-pack needs REMOTE_USER.
	w.Git(t, "remote", "add", "http", srv.AuthURL(repo))
	w.Write(t, "big.bin", strings.Repeat("0123456789abcdef", 1<<17)+sha)
	w.Git(t, "config", "core.compression", "0")
	big := w.CommitAll(t, "big")
	w.Git(t, "push", "--quiet", "http", "main")
	if got := repo.Rev(t, "main"); got != big {
		t.Fatalf("push over http left main at %s, want %s", got, big)
	}
	if srv.Counts().ReceivePack == 0 {
		t.Fatal("push was not counted")
	}

	srv.Reset()
	if out, err := lsRemote(t, strings.Replace(srv.AuthURL(repo), srv.Password, "wrong", 1)); err == nil {
		t.Fatalf("wrong password accepted:\n%s", out)
	}
	if srv.Counts().Unauthorized == 0 {
		t.Fatal("wrong password not counted as unauthorized")
	}

	srv.Down()
	if out, err := lsRemote(t, srv.AuthURL(repo)); err == nil {
		t.Fatalf("server down but ls-remote worked:\n%s", out)
	}
	srv.Up(t)
	if out, err := lsRemote(t, srv.AuthURL(repo)); err != nil {
		t.Fatalf("server back up but ls-remote failed: %v\n%s", err, out)
	}
}
