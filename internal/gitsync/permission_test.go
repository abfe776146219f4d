package gitsync

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// A repository on this machine that this user may not read is a matter of
// who runs the command, not of the network or the config: KindPermission,
// with advice to run as the agent's user. As root, git refuses a repository
// another user owns ("dubious ownership"); as anyone else, an unreadable
// directory is refused by the file system.
func TestLocalRepositoryOfAnotherUser(t *testing.T) {
	t.Setenv("GIT_CONFIG_GLOBAL", "/dev/null") // no safe.directory of the machine's
	t.Setenv("GIT_CONFIG_NOSYSTEM", "1")
	dir := filepath.Join(t.TempDir(), "fleet.git")
	if out, err := exec.Command("git", "init", "-q", "--bare", dir).CombinedOutput(); err != nil {
		t.Fatalf("git init: %v\n%s", err, out)
	}
	if os.Getuid() == 0 {
		if err := filepath.Walk(dir, func(p string, _ os.FileInfo, err error) error {
			if err != nil {
				return err
			}
			return os.Lchown(p, 65534, 65534)
		}); err != nil {
			t.Fatal(err)
		}
	} else {
		if err := os.Chmod(dir, 0); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = os.Chmod(dir, 0o755) })
	}
	_, err := ProbeRemote(t.Context(), Config{URL: dir, Dir: t.TempDir()})
	if KindOf(err) != KindPermission {
		t.Fatalf("kind %q: %v", KindOf(err), err)
	}
}
