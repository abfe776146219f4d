// Package gitserver is a real git server for tests: `git http-backend`
// behind net/http/cgi on 127.0.0.1, with HTTP basic auth, request counters
// and a switch to take it down and bring it back on the same address. It
// also builds repositories and commits with the git CLI, hermetically (no
// global or system git config, fixed author, committer and dates), so that
// tests of any package can stand up a remote in a few lines:
//
//	srv := gitserver.Start(t)
//	repo := srv.NewRepo(t, "fleet")
//	w := repo.Clone(t)
//	w.Write(t, "fleet.json", `{"version":1}`)
//	sha := w.CommitAll(t, "first")
//	w.Push(t, "main")
//	// point the code under test at repo.URL with srv.User / srv.Password
//
// Only tests import it.
package gitserver

import (
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/cgi"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Counts are the requests the server answered since the last Reset.
type Counts struct {
	// InfoRefs is GET .../info/refs?service=git-upload-pack: a ref
	// advertisement, what `git ls-remote` and the first half of a fetch ask.
	InfoRefs int64
	// UploadPack is POST .../git-upload-pack asking for objects: negotiation
	// and transfer. An idle poll must make none.
	UploadPack int64
	// LsRefs is POST .../git-upload-pack carrying only a protocol v2 ls-refs
	// command: how the git CLI lists refs (go-git uses info/refs alone).
	LsRefs int64
	// ReceivePack counts pushes (info/refs for receive-pack and the POST).
	ReceivePack int64
	// Unauthorized counts requests refused for bad or missing credentials.
	Unauthorized int64
	// BytesOut is the size of the response bodies sent.
	BytesOut int64
}

// Server is one git HTTP server. Its methods are safe for concurrent use.
type Server struct {
	// Root holds the bare repositories, one directory per repository.
	Root string
	// User and Password are the basic-auth credentials the server accepts.
	User, Password string

	gitPath  string
	addr     string
	hang     atomic.Bool
	readOnly atomic.Bool

	mu      sync.Mutex
	srv     *http.Server
	ln      net.Listener
	counts  Counts
	stopped chan struct{}
}

// Option changes how Start sets a server up.
type Option func(*Server)

// WithAuth sets the credentials the server accepts. The default user is
// x-access-token (what a GitHub token uses) with a fixed test password.
func WithAuth(user, password string) Option {
	return func(s *Server) { s.User, s.Password = user, password }
}

// ReadOnly makes the server refuse pushes with 403, as a forge does for a
// credential that may read but not write.
func (s *Server) ReadOnly(on bool) { s.readOnly.Store(on) }

// Start starts a server on 127.0.0.1 for the length of the test.
func Start(t testing.TB, opts ...Option) *Server {
	t.Helper()
	gitPath, err := exec.LookPath("git")
	if err != nil {
		t.Fatalf("gitserver needs the git CLI: %v", err)
	}
	s := &Server{
		Root:     t.TempDir(),
		User:     "x-access-token",
		Password: "test-token-" + strconv.Itoa(os.Getpid()),
		gitPath:  gitPath,
	}
	for _, o := range opts {
		o(s)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s.addr = ln.Addr().String()
	s.serve(ln)
	t.Cleanup(s.Down)
	return s
}

// URL is the base URL; a repository named N is at URL + "/N.git".
func (s *Server) URL() string { return "http://" + s.addr }

func (s *Server) serve(ln net.Listener) {
	srv := &http.Server{Handler: http.HandlerFunc(s.handle), ReadHeaderTimeout: 10 * time.Second}
	done := make(chan struct{})
	s.mu.Lock()
	s.srv, s.ln, s.stopped = srv, ln, done
	s.mu.Unlock()
	go func() {
		defer close(done)
		_ = srv.Serve(ln)
	}()
}

// Down closes the listener and every open connection: clients see
// "connection refused" until Up. Calling it twice is harmless.
func (s *Server) Down() {
	s.mu.Lock()
	srv, done := s.srv, s.stopped
	s.srv = nil
	s.mu.Unlock()
	if srv == nil {
		return
	}
	_ = srv.Close()
	<-done
}

// Up listens again on the same address after Down.
func (s *Server) Up(t testing.TB) {
	t.Helper()
	s.mu.Lock()
	running := s.srv != nil
	s.mu.Unlock()
	if running {
		return
	}
	var ln net.Listener
	var err error
	// The port was ours a moment ago; a retry covers a slow close.
	for range 50 {
		if ln, err = net.Listen("tcp", s.addr); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("gitserver: listen again on %s: %v", s.addr, err)
	}
	s.serve(ln)
}

// Hang makes every request wait until its client gives up (or until Hang
// is turned off), to test deadlines.
func (s *Server) Hang(on bool) { s.hang.Store(on) }

// Counts returns the counters.
func (s *Server) Counts() Counts {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.counts
}

// Reset zeroes the counters.
func (s *Server) Reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.counts = Counts{}
}

func (s *Server) count(f func(*Counts)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f(&s.counts)
}

type countingWriter struct {
	http.ResponseWriter
	n int64
}

func (w *countingWriter) Write(p []byte) (int, error) {
	n, err := w.ResponseWriter.Write(p)
	w.n += int64(n)
	return n, err
}

func (s *Server) handle(w http.ResponseWriter, r *http.Request) {
	if s.hang.Load() {
		for s.hang.Load() {
			select {
			case <-r.Context().Done():
				return
			case <-time.After(10 * time.Millisecond):
			}
		}
	}
	user, pass, ok := r.BasicAuth()
	if !ok || user != s.User || pass != s.Password {
		s.count(func(c *Counts) { c.Unauthorized++ })
		w.Header().Set("WWW-Authenticate", `Basic realm="gitserver"`)
		http.Error(w, "unauthorized", http.StatusUnauthorized)
		return
	}
	// net/http/cgi refuses chunked bodies, and git sends large pushes
	// chunked: buffer the body so it has a length.
	var body []byte
	if r.Body != nil {
		var err error
		if body, err = io.ReadAll(r.Body); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		r.ContentLength = int64(len(body))
		r.TransferEncoding = nil
	}
	switch {
	case r.URL.Query().Get("service") == "git-receive-pack" || strings.HasSuffix(r.URL.Path, "/git-receive-pack"):
		s.count(func(c *Counts) { c.ReceivePack++ })
		if s.readOnly.Load() {
			http.Error(w, "Permission to push denied", http.StatusForbidden)
			return
		}
	case strings.HasSuffix(r.URL.Path, "/info/refs"):
		s.count(func(c *Counts) { c.InfoRefs++ })
	case r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/git-upload-pack"):
		if isLsRefs(body, r.Header.Get("Content-Encoding")) {
			s.count(func(c *Counts) { c.LsRefs++ })
		} else {
			s.count(func(c *Counts) { c.UploadPack++ })
		}
	}
	h := &cgi.Handler{
		Path: s.gitPath,
		Args: []string{"http-backend"},
		// http-backend explains refusals on stderr; the client sees them too.
		Stderr: io.Discard,
		Env: []string{
			"GIT_PROJECT_ROOT=" + s.Root,
			"GIT_HTTP_EXPORT_ALL=1",
			"GIT_CONFIG_NOSYSTEM=1",
			"GIT_CONFIG_GLOBAL=/dev/null",
			// cgi.Handler does not pass the authenticated user on, and
			// http-backend refuses pushes without one.
			"REMOTE_USER=" + user,
		},
	}
	cw := &countingWriter{ResponseWriter: w}
	h.ServeHTTP(cw, r)
	s.count(func(c *Counts) { c.BytesOut += cw.n })
}

// isLsRefs reports whether an upload-pack request body is a protocol v2
// ls-refs command, which transfers no objects.
func isLsRefs(body []byte, encoding string) bool {
	if encoding == "gzip" {
		zr, err := gzip.NewReader(bytes.NewReader(body))
		if err != nil {
			return false
		}
		if body, err = io.ReadAll(io.LimitReader(zr, 1<<20)); err != nil {
			return false
		}
	}
	return bytes.HasPrefix(body, []byte("0014command=ls-refs\n"))
}

// Repo is a bare repository served by a Server.
type Repo struct {
	// Dir is the bare repository on disk.
	Dir string
	// URL is its http URL, without credentials.
	URL string
}

// NewRepo creates an empty bare repository NAME.git whose default branch is
// main and which accepts pushes over http.
func (s *Server) NewRepo(t testing.TB, name string) *Repo {
	t.Helper()
	dir := filepath.Join(s.Root, name+".git")
	Git(t, "", "init", "--quiet", "--bare", "--initial-branch=main", dir)
	Git(t, dir, "config", "http.receivepack", "true")
	return &Repo{Dir: dir, URL: s.URL() + "/" + name + ".git"}
}

// NewBare creates an empty bare repository at dir, outside any server; for
// tests of local paths and file:// URLs.
func NewBare(t testing.TB, dir string) *Repo {
	t.Helper()
	Git(t, "", "init", "--quiet", "--bare", "--initial-branch=main", dir)
	return &Repo{Dir: dir, URL: "file://" + dir}
}

// AuthURL is the repository URL with the server's credentials in it, for
// the git CLI.
func (s *Server) AuthURL(r *Repo) string {
	return strings.Replace(r.URL, "http://", "http://"+s.User+":"+s.Password+"@", 1)
}

// Git runs git in the bare repository and returns its trimmed stdout.
func (r *Repo) Git(t testing.TB, args ...string) string {
	t.Helper()
	return Git(t, r.Dir, args...)
}

// UpdateRef points ref at commit in the bare repository, as a forge does
// for refs/pull/N/head.
func (r *Repo) UpdateRef(t testing.TB, ref, commit string) {
	t.Helper()
	r.Git(t, "update-ref", ref, commit)
}

// DeleteRef removes ref from the bare repository.
func (r *Repo) DeleteRef(t testing.TB, ref string) {
	t.Helper()
	r.Git(t, "update-ref", "-d", ref)
}

// Rev returns the commit a revision names in the bare repository.
func (r *Repo) Rev(t testing.TB, rev string) string {
	t.Helper()
	return r.Git(t, "rev-parse", rev)
}

// Clone makes a working copy of the bare repository (through the file
// system, not the server, so that counters only see the code under test).
func (r *Repo) Clone(t testing.TB) *Work {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "work")
	Git(t, "", "clone", "--quiet", r.Dir, dir)
	Git(t, dir, "checkout", "--quiet", "-B", "main")
	return &Work{Dir: dir}
}

// Work is a non-bare working copy used to make commits.
type Work struct {
	Dir string
	n   int
}

// Git runs git in the working copy and returns its trimmed stdout.
func (w *Work) Git(t testing.TB, args ...string) string {
	t.Helper()
	return Git(t, w.Dir, args...)
}

// Write writes a file (creating directories) in the working copy.
func (w *Work) Write(t testing.TB, path, content string) {
	t.Helper()
	full := filepath.Join(w.Dir, filepath.FromSlash(path))
	if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// CommitAll stages everything and commits with a fixed author, committer
// and a date one minute after the previous commit of this Work; it returns
// the new commit's hash.
func (w *Work) CommitAll(t testing.TB, msg string) string {
	t.Helper()
	w.n++
	w.Git(t, "add", "-A")
	when := fmt.Sprintf("%d +0000", 1767225600+60*w.n) // 2026-01-01 plus n minutes
	cmd := command(w.Dir, "commit", "--quiet", "--allow-empty", "-m", msg)
	cmd.Env = append(cmd.Env, "GIT_AUTHOR_DATE="+when, "GIT_COMMITTER_DATE="+when)
	run(t, cmd)
	return w.Git(t, "rev-parse", "HEAD")
}

// Push pushes refspecs (for example "main", "+main", "HEAD:refs/pull/1/head")
// to the bare repository it was cloned from.
func (w *Work) Push(t testing.TB, refspecs ...string) {
	t.Helper()
	w.Git(t, append([]string{"push", "--quiet", "origin"}, refspecs...)...)
}

// Env is the environment every git command of this package runs with: no
// global or system configuration and a fixed identity, so that results do
// not depend on the machine.
func Env() []string {
	env := []string{
		"GIT_CONFIG_GLOBAL=/dev/null",
		"GIT_CONFIG_NOSYSTEM=1",
		"GIT_AUTHOR_NAME=Test Author",
		"GIT_AUTHOR_EMAIL=author@example.com",
		"GIT_COMMITTER_NAME=Test Committer",
		"GIT_COMMITTER_EMAIL=committer@example.com",
		"GIT_TERMINAL_PROMPT=0",
	}
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "PATH=") || strings.HasPrefix(kv, "HOME=") || strings.HasPrefix(kv, "TMPDIR=") {
			env = append(env, kv)
		}
	}
	return env
}

func command(dir string, args ...string) *exec.Cmd {
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = Env()
	return cmd
}

func run(t testing.TB, cmd *exec.Cmd) string {
	t.Helper()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(cmd.Args, " "), err, stderr.String())
	}
	return strings.TrimSpace(stdout.String())
}

// Git runs the git CLI in dir with Env and returns its trimmed stdout; it
// fails the test on a non-zero exit.
func Git(t testing.TB, dir string, args ...string) string {
	t.Helper()
	return run(t, command(dir, args...))
}

// GitInput is Git with stdin, for plumbing such as fast-import or mktree.
func GitInput(t testing.TB, dir string, stdin io.Reader, args ...string) string {
	t.Helper()
	cmd := command(dir, args...)
	cmd.Stdin = stdin
	return run(t, cmd)
}

// ErrNoGit is returned by Available when the git CLI is missing.
var ErrNoGit = errors.New("gitserver: git CLI not found")

// Available reports whether the git CLI is installed.
func Available() error {
	if _, err := exec.LookPath("git"); err != nil {
		return ErrNoGit
	}
	return nil
}
