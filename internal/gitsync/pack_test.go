package gitsync

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fleet-agent/fleet-agent/internal/testutil/gitserver"
	"github.com/go-git/go-git/v5/plumbing"
)

// TestPackWriterMatchesGit syncs a history full of delta chains and checks
// the copy with git itself: fsck passes, and every index gitsync wrote is
// byte for byte the one git index-pack makes of the same pack. Polls and a
// maintenance repack of the copy go through the writer again.
func TestPackWriterMatchesGit(t *testing.T) {
	e := newEnv(t)
	e.cfg.MaxPacks = 3
	text := deltaHistory(t, e, 60)
	e.remo.Git(t, "repack", "-a", "-d", "-f", "-q", "--depth=50")

	r := e.open(t)
	mustPoll(t, r)
	checkCopy(t, e.cfg.Dir)
	for i := range 4 {
		e.commit(t, fmt.Sprintf("more %d", i), map[string]string{"grow.txt": text + strings.Repeat("x", i+1)})
		e.work.Push(t, "main")
		mustPoll(t, r)
	}
	if n, _ := r.Packs(); n != 1 {
		t.Fatalf("packs after maintenance = %d, want 1", n)
	}
	checkCopy(t, e.cfg.Dir)
	if _, err := r.ReadFile(r.Last().Tip, "grow.txt"); err != nil {
		t.Fatal(err)
	}
}

// deltaHistory commits n times one file that grows (long delta chains) and
// one of several that are rewritten, and pushes.
func deltaHistory(t *testing.T, e *env, n int) string {
	t.Helper()
	var text strings.Builder
	for i := range n {
		fmt.Fprintf(&text, "line %d of the growing file\n", i)
		e.commit(t, fmt.Sprintf("c%d", i), map[string]string{
			"grow.txt":                    text.String(),
			fmt.Sprintf("d%d/f.txt", i%7): strings.Repeat(fmt.Sprintf("%d ", i), 500),
		})
	}
	e.work.Push(t, "main")
	return text.String()
}

// TestPackWriterRefDeltas writes packs of ref-deltas (as a server without
// ofs-delta sends) and of ofs-deltas straight from git pack-objects.
func TestPackWriterRefDeltas(t *testing.T) {
	for _, ofs := range []bool{false, true} {
		t.Run(fmt.Sprintf("ofs=%v", ofs), func(t *testing.T) {
			e := newEnv(t)
			deltaHistory(t, e, 40)
			args := []string{"pack-objects", "--stdout", "--revs", "-q", "--depth=50", "--window=20"}
			if ofs {
				args = append(args, "--delta-base-offset")
			}
			// Not gitserver.GitInput: it trims its output.
			cmd := exec.Command("git", args...)
			cmd.Dir, cmd.Env, cmd.Stdin = e.remo.Dir, gitserver.Env(), strings.NewReader("main\n")
			pack, err := cmd.Output()
			if err != nil {
				t.Fatal(err)
			}
			r := e.open(t)
			if err := writePack(t, r, pack); err != nil {
				t.Fatal(err)
			}
			checkCopy(t, e.cfg.Dir)
			packs, _ := filepath.Glob(filepath.Join(e.cfg.Dir, "objects", "pack", "pack-*.pack"))
			out := gitserver.Git(t, e.cfg.Dir, "verify-pack", "-v", packs[0])
			if !strings.Contains(out, "chain length = 10") {
				t.Fatalf("the pack has no long delta chains:\n%s", out)
			}
		})
	}
}

func writePack(t *testing.T, r *Repo, data []byte) error {
	t.Helper()
	w, err := r.repo.Storer.(*packStorage).PackfileWriter()
	if err != nil {
		t.Fatal(err)
	}
	_, werr := w.Write(data)
	if cerr := w.Close(); cerr != nil {
		return cerr
	}
	return werr
}

func checkCopy(t *testing.T, dir string) {
	t.Helper()
	gitserver.Git(t, dir, "fsck", "--full", "--strict", "--no-dangling")
	packs, _ := filepath.Glob(filepath.Join(dir, "objects", "pack", "pack-*.pack"))
	if len(packs) == 0 {
		t.Fatal("no pack in the copy")
	}
	for _, p := range packs {
		want := filepath.Join(t.TempDir(), "git.idx")
		gitserver.Git(t, dir, "index-pack", "-o", want, p)
		a, err := os.ReadFile(strings.TrimSuffix(p, ".pack") + ".idx")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := os.ReadFile(want)
		if !bytes.Equal(a, b) {
			t.Fatalf("index of %s differs from git's", filepath.Base(p))
		}
	}
	if left, _ := filepath.Glob(filepath.Join(dir, "objects", "pack", "tmp_*")); len(left) > 0 {
		t.Fatalf("temporary files left: %v", left)
	}
}

// TestPackWriterRefusesDamage feeds the writer damaged packs: each is
// refused, and nothing is left in the copy.
func TestPackWriterRefusesDamage(t *testing.T) {
	e := newEnv(t)
	for i := range 10 {
		e.commit(t, fmt.Sprintf("c%d", i), map[string]string{"f.txt": strings.Repeat(fmt.Sprintf("%d\n", i), 300)})
	}
	e.work.Push(t, "main")
	e.remo.Git(t, "repack", "-a", "-d", "-f", "-q")
	packs, _ := filepath.Glob(filepath.Join(e.remo.Dir, "objects", "pack", "pack-*.pack"))
	if len(packs) != 1 {
		t.Fatalf("remote packs: %v", packs)
	}
	good, err := os.ReadFile(packs[0])
	if err != nil {
		t.Fatal(err)
	}
	r := e.open(t)
	write := func(data []byte) error { return writePack(t, r, data) }
	flip := func(at int) []byte {
		b := bytes.Clone(good)
		b[at] ^= 0x40
		return b
	}
	for name, data := range map[string][]byte{
		"truncated":        good[:len(good)/2],
		"no trailer":       good[:len(good)-20],
		"bad checksum":     flip(len(good) - 1),
		"bad object data":  flip(len(good) / 2),
		"bad signature":    flip(0),
		"junk at the end":  append(bytes.Clone(good), 'x'),
		"first object bad": flip(13),
	} {
		if err := write(data); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if left, _ := filepath.Glob(filepath.Join(e.cfg.Dir, "objects", "pack", "*")); len(left) > 0 {
		t.Fatalf("files left: %v", left)
	}
	// The good pack goes in, and is readable at once.
	if err := write(good); err != nil {
		t.Fatal(err)
	}
	tip := e.remo.Rev(t, "main")
	if _, err := r.repo.CommitObject(plumbing.NewHash(tip)); err != nil {
		t.Fatalf("commit of the written pack not readable: %v", err)
	}
	checkCopy(t, e.cfg.Dir)
}
