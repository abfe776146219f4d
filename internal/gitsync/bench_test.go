package gitsync

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fleet-agent/fleet-agent/internal/testutil/gitserver"
	"github.com/go-git/go-billy/v5/osfs"
	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/config"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/cache"
	githttp "github.com/go-git/go-git/v5/plumbing/transport/http"
	"github.com/go-git/go-git/v5/storage/filesystem"
)

// The generated repository: benchCommits commits over a tree of benchFiles
// files of benchFileBytes each (5 MB); every commit after the first
// rewrites one file, as edits to a fleet repository would.
const (
	benchCommits   = 2000
	benchFiles     = 500
	benchFileBytes = 10_000
)

var (
	benchOnce sync.Once
	benchDir  string // a bare repository, built once per process
	benchErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if benchDir != "" {
		_ = os.RemoveAll(filepath.Dir(benchDir))
	}
	os.Exit(code)
}

// generated returns the bare repository, building it with git fast-import
// the first time (a few seconds).
func generated(b *testing.B) string {
	b.Helper()
	benchOnce.Do(func() {
		parent, err := os.MkdirTemp("", "gitsync-bench-")
		if err != nil {
			benchErr = err
			return
		}
		dir := filepath.Join(parent, "big.git")
		if out, err := gitCmd("", nil, "init", "--quiet", "--bare", "--initial-branch=main", dir); err != nil {
			benchErr = fmt.Errorf("init: %v: %s", err, out)
			return
		}
		pr, pw, err := os.Pipe()
		if err != nil {
			benchErr = err
			return
		}
		go func() {
			w := bufio.NewWriterSize(pw, 1<<20)
			writeFastImport(w)
			_ = w.Flush()
			_ = pw.Close()
		}()
		out, err := gitCmd(dir, pr, "fast-import", "--quiet")
		_ = pr.Close()
		if err != nil {
			benchErr = fmt.Errorf("fast-import: %v: %s", err, out)
			return
		}
		// A served repository is packed the way a forge keeps it.
		if out, err := gitCmd(dir, nil, "repack", "-a", "-d", "-q"); err != nil {
			benchErr = fmt.Errorf("repack: %v: %s", err, out)
			return
		}
		benchDir = dir
	})
	if benchErr != nil {
		b.Fatal(benchErr)
	}
	return benchDir
}

func gitCmd(dir string, stdin *os.File, args ...string) ([]byte, error) {
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = gitserver.Env()
	if stdin != nil {
		cmd.Stdin = stdin
	}
	return cmd.CombinedOutput()
}

func writeFastImport(w *bufio.Writer) {
	rng := rand.New(rand.NewPCG(1, 2))
	content := func() []byte {
		// Text of random words: compresses about as well as real files.
		var sb strings.Builder
		for sb.Len() < benchFileBytes {
			fmt.Fprintf(&sb, "%x ", rng.Uint64()&0xffffff)
			if rng.IntN(12) == 0 {
				sb.WriteByte('\n')
			}
		}
		return []byte(sb.String()[:benchFileBytes])
	}
	file := func(i int, data []byte) {
		fmt.Fprintf(w, "M 100644 inline dir%02d/file%03d.txt\ndata %d\n", i%20, i, len(data))
		w.Write(data)
		w.WriteByte('\n')
	}
	for c := 0; c < benchCommits; c++ {
		msg := fmt.Sprintf("commit %d", c)
		ts := 1767225600 + 60*c
		fmt.Fprintf(w, "commit refs/heads/main\nmark :%d\nauthor A <a@example.com> %d +0000\ncommitter C <c@example.com> %d +0000\ndata %d\n%s\n", c+1, ts, ts, len(msg), msg)
		if c > 0 {
			fmt.Fprintf(w, "from :%d\n", c)
		}
		if c == 0 {
			for i := 0; i < benchFiles; i++ {
				file(i, content())
			}
		} else {
			file(rng.IntN(benchFiles), content())
		}
		w.WriteByte('\n')
	}
}

// benchServer serves a copy of the generated repository.
func benchServer(b *testing.B) (*gitserver.Server, *gitserver.Repo) {
	b.Helper()
	src := generated(b)
	srv := gitserver.Start(b)
	remo := &gitserver.Repo{Dir: filepath.Join(srv.Root, "big.git"), URL: srv.URL() + "/big.git"}
	gitserver.Git(b, "", "clone", "--quiet", "--bare", "--no-local", src, remo.Dir)
	return srv, remo
}

// run measures a command: wall time and peak resident set. With GNU time
// installed the command runs under /usr/bin/time, which reports the peak of
// the process it starts (git's index-pack included, as wait4 folds waited-for
// children in). Without it, the rusage of the direct child is used; that
// figure is floored by this process's own size, because Go starts children
// with vfork and Linux carries the parent's high-water mark across exec.
func run(b *testing.B, cmd *exec.Cmd) (time.Duration, int64) {
	b.Helper()
	var rssFile string
	if _, err := os.Stat("/usr/bin/time"); err == nil {
		rssFile = filepath.Join(b.TempDir(), "rss")
		cmd.Args = append([]string{"/usr/bin/time", "-f", "%M", "-o", rssFile}, cmd.Args...)
		cmd.Path = "/usr/bin/time"
	}
	start := time.Now()
	out, err := cmd.CombinedOutput()
	d := time.Since(start)
	if err != nil {
		b.Fatalf("%s: %v\n%s", strings.Join(cmd.Args, " "), err, out)
	}
	if rssFile != "" {
		data, err := os.ReadFile(rssFile)
		if err != nil {
			b.Fatal(err)
		}
		var kb int64
		if _, err := fmt.Sscan(strings.TrimSpace(string(data)), &kb); err != nil {
			b.Fatalf("/usr/bin/time wrote %q", data)
		}
		return d, kb * 1024
	}
	ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage)
	if !ok {
		b.Fatal("no rusage on this platform")
	}
	return d, ru.Maxrss * 1024
}

func cliClone(b *testing.B, srv *gitserver.Server, remo *gitserver.Repo, extra ...string) (time.Duration, int64) {
	b.Helper()
	dst := filepath.Join(b.TempDir(), "clone")
	args := append([]string{"clone", "--quiet", "--single-branch", "--no-checkout", "--no-tags"}, extra...)
	cmd := exec.Command("git", append(args, srv.AuthURL(remo), dst)...)
	cmd.Env = gitserver.Env()
	return run(b, cmd)
}

// helperSync runs a first sync in a child process of the test binary, so
// that its peak memory is measured the same way as git's.
func helperSync(b *testing.B, srv *gitserver.Server, remo *gitserver.Repo, mode string) (time.Duration, int64) {
	b.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperFirstSync$", "-test.count=1")
	cmd.Env = append(gitserver.Env(),
		"GITSYNC_HELPER=1", "GITSYNC_HELPER_MODE="+mode, "GITSYNC_HELPER_URL="+remo.URL,
		"GITSYNC_HELPER_USER="+srv.User, "GITSYNC_HELPER_PASS="+srv.Password,
		"GITSYNC_HELPER_DIR="+filepath.Join(b.TempDir(), "copy"))
	return run(b, cmd)
}

// TestHelperFirstSync is not a test: it is the child process of the
// benchmarks, and skips unless they start it.
func TestHelperFirstSync(t *testing.T) {
	if os.Getenv("GITSYNC_HELPER") != "1" {
		t.Skip("child process of the benchmarks")
	}
	url, dir := os.Getenv("GITSYNC_HELPER_URL"), os.Getenv("GITSYNC_HELPER_DIR")
	user, pass := os.Getenv("GITSYNC_HELPER_USER"), os.Getenv("GITSYNC_HELPER_PASS")
	switch os.Getenv("GITSYNC_HELPER_MODE") {
	case "gitsync":
		r, err := Open(Config{URL: url, Dir: dir, Auth: Auth{Username: user, Password: "p"}, Secrets: mapResolver{"p": pass}})
		if err != nil {
			t.Fatal(err)
		}
		s, err := r.Poll(context.Background())
		if err != nil || s.Tip == "" {
			t.Fatalf("first sync: %v", err)
		}
		if _, err := r.ReadFile(s.Tip, "dir00/file000.txt"); err != nil {
			t.Fatal(err)
		}
		_ = r.Close()
	case "shallow":
		if _, err := shallowClone(dir, url, user, pass); err != nil {
			t.Fatal(err)
		}
	default:
		t.Fatal("unknown mode")
	}
}

// shallowClone is what gitsync would do if it kept a Depth 1 copy.
func shallowClone(dir, url, user, pass string) (*git.Repository, error) {
	st := filesystem.NewStorageWithOptions(osfs.New(dir), cache.NewObjectLRU(4<<20), filesystem.Options{ExclusiveAccess: true})
	return git.Clone(st, nil, &git.CloneOptions{
		URL: url, Auth: &githttp.BasicAuth{Username: user, Password: pass},
		Depth: 1, SingleBranch: true, ReferenceName: plumbing.NewBranchReferenceName("main"),
		NoCheckout: true, Tags: git.NoTags,
	})
}

// BenchmarkIdlePoll compares a poll that finds nothing moved with
// `git ls-remote` on the same remote. Goal: at most 1.2x, no upload-pack.
func BenchmarkIdlePoll(b *testing.B) {
	srv, remo := benchServer(b)
	r, err := Open(Config{URL: remo.URL, Dir: b.TempDir(), Auth: Auth{Token: tokenRef}, Secrets: mapResolver{tokenRef: srv.Password}})
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close()
	if _, err := r.Poll(b.Context()); err != nil {
		b.Fatal(err)
	}
	srv.Reset()
	var polls time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		s, err := r.Poll(b.Context())
		polls += time.Since(start)
		if err != nil || s.Fetched {
			b.Fatalf("idle poll: fetched=%v err=%v", s.Fetched, err)
		}
	}
	b.StopTimer()
	c := srv.Counts()
	var cli time.Duration
	for i := 0; i < b.N; i++ {
		cmd := exec.Command("git", "ls-remote", srv.AuthURL(remo))
		cmd.Env = gitserver.Env()
		d, _ := run(b, cmd)
		cli += d
	}
	b.ReportMetric(float64(polls.Microseconds())/float64(b.N), "gitsync-us/poll")
	b.ReportMetric(float64(cli.Microseconds())/float64(b.N), "ls-remote-us")
	b.ReportMetric(float64(polls)/float64(cli), "x-ls-remote")
	b.ReportMetric(float64(c.UploadPack)/float64(b.N), "upload-packs/poll")
	b.ReportMetric(float64(c.BytesOut)/float64(b.N), "bytes/poll")
}

// BenchmarkFirstSync compares gitsync's first sync (full history, as it
// keeps) with `git clone --single-branch` (the same history) and
// `git clone --depth 1`, and with a go-git Depth 1 clone. Each runs as its
// own process: time and peak RSS are measured alike.
func BenchmarkFirstSync(b *testing.B) {
	srv, remo := benchServer(b)
	var tSync, tFull, tShallow, tGoShallow time.Duration
	var mSync, mFull, mShallow, mGoShallow int64
	var bSync, bFull int64
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		srv.Reset()
		d, m := helperSync(b, srv, remo, "gitsync")
		bSync += srv.Counts().BytesOut
		tSync, mSync = tSync+d, max(mSync, m)
		b.StopTimer()
		srv.Reset()
		d, m = cliClone(b, srv, remo)
		bFull += srv.Counts().BytesOut
		tFull, mFull = tFull+d, max(mFull, m)
		d, m = cliClone(b, srv, remo, "--depth", "1")
		tShallow, mShallow = tShallow+d, max(mShallow, m)
		d, m = helperSync(b, srv, remo, "shallow")
		tGoShallow, mGoShallow = tGoShallow+d, max(mGoShallow, m)
		b.StartTimer()
	}
	n := float64(b.N)
	b.ReportMetric(float64(tSync.Milliseconds())/n, "gitsync-ms")
	b.ReportMetric(float64(mSync)/(1<<20), "gitsync-MiB")
	b.ReportMetric(float64(tFull.Milliseconds())/n, "clone-ms")
	b.ReportMetric(float64(mFull)/(1<<20), "clone-MiB")
	b.ReportMetric(float64(tShallow.Milliseconds())/n, "clone-depth1-ms")
	b.ReportMetric(float64(mShallow)/(1<<20), "clone-depth1-MiB")
	b.ReportMetric(float64(tGoShallow.Milliseconds())/n, "gogit-depth1-ms")
	b.ReportMetric(float64(mGoShallow)/(1<<20), "gogit-depth1-MiB")
	b.ReportMetric(float64(tSync)/float64(tFull), "x-clone-time")
	b.ReportMetric(float64(mSync)/float64(mFull), "x-clone-mem")
	b.ReportMetric(float64(bSync)/float64(bFull), "x-clone-bytes")
}

// BenchmarkIncrementalFetch measures the cost of one new commit for the
// copy gitsync keeps (full history) and for a Depth 1 copy: the numbers
// behind choosing full history.
func BenchmarkIncrementalFetch(b *testing.B) {
	srv, remo := benchServer(b)
	r, err := Open(Config{URL: remo.URL, Dir: b.TempDir(), Auth: Auth{Token: tokenRef}, Secrets: mapResolver{tokenRef: srv.Password}})
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close()
	if _, err := r.Poll(b.Context()); err != nil {
		b.Fatal(err)
	}
	shallow, err := shallowClone(filepath.Join(b.TempDir(), "shallow"), remo.URL, srv.User, srv.Password)
	if err != nil {
		b.Fatal(err)
	}
	var tFull, tShallow time.Duration
	var bFull, bShallow int64
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		// One new commit that changes one file, made in the bare remote.
		blob := gitserver.GitInput(b, remo.Dir, strings.NewReader(fmt.Sprintf("change %d\n", i)), "hash-object", "-w", "--stdin")
		tree := gitserver.GitInput(b, remo.Dir, strings.NewReader(
			gitserver.Git(b, remo.Dir, "ls-tree", "main")+fmt.Sprintf("\n100644 blob %s\tnew%d.txt\n", blob, i)), "mktree")
		commit := gitserver.Git(b, remo.Dir, "commit-tree", tree, "-p", "main", "-m", "one more")
		remo.UpdateRef(b, "refs/heads/main", commit)
		srv.Reset()
		b.StartTimer()

		start := time.Now()
		s, err := r.Poll(b.Context())
		tFull += time.Since(start)
		if err != nil || s.Tip != commit {
			b.Fatalf("poll: %v, tip %s want %s", err, s.Tip, commit)
		}
		b.StopTimer()
		bFull += srv.Counts().BytesOut
		srv.Reset()
		start = time.Now()
		err = shallow.FetchContext(b.Context(), &git.FetchOptions{
			RefSpecs: []config.RefSpec{"+refs/heads/main:refs/heads/main"}, Depth: 1, Tags: git.NoTags,
			Auth: &githttp.BasicAuth{Username: srv.User, Password: srv.Password},
		})
		tShallow += time.Since(start)
		if err != nil {
			b.Fatalf("shallow fetch: %v", err)
		}
		bShallow += srv.Counts().BytesOut
		b.StartTimer()
	}
	n := float64(b.N)
	b.ReportMetric(float64(tFull.Microseconds())/n/1000, "full-ms")
	b.ReportMetric(float64(bFull)/n, "full-bytes")
	b.ReportMetric(float64(tShallow.Microseconds())/n/1000, "depth1-ms")
	b.ReportMetric(float64(bShallow)/n, "depth1-bytes")
}

// BenchmarkFirstSyncInProcess is the first sync without a child process,
// for profiling; it reports the Go heap the sync needed.
func BenchmarkFirstSyncInProcess(b *testing.B) {
	srv, remo := benchServer(b)
	var ms runtime.MemStats
	var peakSys uint64
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		r, err := Open(Config{URL: remo.URL, Dir: filepath.Join(b.TempDir(), "copy"), Auth: Auth{Token: tokenRef}, Secrets: mapResolver{tokenRef: srv.Password}})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := r.Poll(b.Context()); err != nil {
			b.Fatal(err)
		}
		_ = r.Close()
		runtime.ReadMemStats(&ms)
		peakSys = max(peakSys, ms.HeapSys)
	}
	b.ReportMetric(float64(peakSys)/(1<<20), "heapsys-MiB")
}
