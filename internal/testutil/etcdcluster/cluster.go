// Package etcdcluster is a real etcd cluster for tests: one or three
// members of the etcd binary the Kubernetes control plane cache builds,
// on loopback ports, their data under the test's directory, with TLS
// (client certificates) and a user with a password when asked. A member
// can be killed, paused and restarted on its data dir and ports, so a test
// can lose a member or the quorum and get it back.
package etcdcluster

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/fleet-agent/fleet-agent/internal/testutil/kubeplane"
)

// Options say what cluster to start.
type Options struct {
	// Members is how many members: 1 (the default) or 3 (one can be lost
	// without losing the quorum). Any count from 1 works.
	Members int
	// TLS serves clients and peers over TLS from a CA of the cluster's own
	// and requires a client certificate (TLSFiles).
	TLS bool
	// Username and Password, when Username is set, turn etcd's
	// authentication on: a root user (its password random, RootPassword)
	// and this user, granted read and write on every key.
	Username, Password string
	// Start bounds the wait for the new cluster to be healthy; 60s when 0.
	Start time.Duration
}

// Cluster is a running cluster. Its methods are safe for one goroutine at
// a time per member; Endpoints, TLSFiles and Client for any.
type Cluster struct {
	bin     string
	dir     string
	opts    Options
	pki     *pki
	clTLS   *tls.Config
	rootPw  string
	members []*member
}

type member struct {
	name         string
	dataDir      string
	logPath      string
	client, peer string // URLs
	args         []string
	mu           sync.Mutex
	cmd          *exec.Cmd
	done         chan struct{}
	waitErr      error
	killed       bool // by Kill, since the last start
	starts       int
}

// Start starts a cluster for the test t, waits until it is healthy and
// stops it when t ends. On a failed test it logs each member's log tail.
func Start(t testing.TB, opts Options) *Cluster {
	t.Helper()
	c, err := New(t.TempDir(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(c.Logs(40))
		}
		c.Close()
	})
	return c
}

// Bin finds the etcd binary of the control plane cache, or says how to
// build it.
func Bin() (string, error) {
	cache, err := kubeplane.FindCache()
	if err != nil {
		return "", fmt.Errorf("etcdcluster: no etcd binary: run `scripts/kube-cache.sh` (or `make kube`) to build the control plane cache, which holds it: %w", err)
	}
	bin := cache.Bin("etcd")
	if fi, err := os.Stat(bin); err != nil || fi.Mode()&0o111 == 0 {
		return "", fmt.Errorf("etcdcluster: %s is missing or not executable: run `scripts/kube-cache.sh` to rebuild the control plane cache", bin)
	}
	return bin, nil
}

// New starts a cluster under dir (data, logs, keys) and waits until every
// member is healthy. The caller must Close it.
func New(dir string, opts Options) (*Cluster, error) {
	bin, err := Bin()
	if err != nil {
		return nil, err
	}
	if opts.Members <= 0 {
		opts.Members = 1
	}
	if opts.Start <= 0 {
		opts.Start = 60 * time.Second
	}
	c := &Cluster{bin: bin, dir: dir, opts: opts}
	scheme := "http"
	if opts.TLS {
		scheme = "https"
		if c.pki, err = newPKI(filepath.Join(dir, "pki")); err != nil {
			return nil, fmt.Errorf("etcdcluster: keys: %w", err)
		}
		if c.clTLS, err = c.pki.client.Config(); err != nil {
			return nil, fmt.Errorf("etcdcluster: client keys: %w", err)
		}
	}
	ports, err := kubeplane.FreePorts(2 * opts.Members)
	if err != nil {
		return nil, err
	}
	var initial []string
	for i := range opts.Members {
		m := &member{
			name:    "m" + strconv.Itoa(i),
			dataDir: filepath.Join(dir, "m"+strconv.Itoa(i), "data"),
			logPath: filepath.Join(dir, "m"+strconv.Itoa(i), "etcd.log"),
			client:  scheme + "://127.0.0.1:" + strconv.Itoa(ports[2*i]),
			peer:    scheme + "://127.0.0.1:" + strconv.Itoa(ports[2*i+1]),
		}
		c.members = append(c.members, m)
		initial = append(initial, m.name+"="+m.peer)
	}
	token := randHex(8)
	for _, m := range c.members {
		m.args = []string{
			"--name=" + m.name,
			"--data-dir=" + m.dataDir,
			"--listen-client-urls=" + m.client, "--advertise-client-urls=" + m.client,
			"--listen-peer-urls=" + m.peer, "--initial-advertise-peer-urls=" + m.peer,
			"--initial-cluster=" + strings.Join(initial, ","),
			"--initial-cluster-state=new",
			"--initial-cluster-token=etcdcluster-" + token,
			// A SIGKILL loses nothing the process wrote (the kernel keeps
			// it); only a machine crash would, and tests make none. The
			// fsyncs would cost seconds on a shared disk.
			"--unsafe-no-fsync",
			"--log-level=warn",
			// Compaction on, as docs/ha.md asks of a production cluster,
			// with a retention short enough that a test of a minute or more
			// runs across compactions.
			"--auto-compaction-mode=periodic", "--auto-compaction-retention=30s",
		}
		if opts.TLS {
			m.args = append(m.args,
				"--cert-file="+c.pki.memberCert, "--key-file="+c.pki.memberKey,
				"--client-cert-auth", "--trusted-ca-file="+c.pki.client.CA,
				"--peer-cert-file="+c.pki.memberCert, "--peer-key-file="+c.pki.memberKey,
				"--peer-client-cert-auth", "--peer-trusted-ca-file="+c.pki.client.CA,
			)
		}
	}
	for i := range c.members {
		if err := c.start(i); err != nil {
			c.Close()
			return nil, err
		}
	}
	if err := c.WaitHealthy(opts.Start); err != nil {
		err = fmt.Errorf("%w\n%s", err, c.Logs(30))
		c.Close()
		return nil, err
	}
	if opts.Username != "" {
		if err := c.enableAuth(); err != nil {
			err = fmt.Errorf("%w\n%s", err, c.Logs(30))
			c.Close()
			return nil, err
		}
	}
	return c, nil
}

func randHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err) // crypto/rand does not fail on Linux
	}
	return hex.EncodeToString(b)
}

// Endpoints are the members' client URLs, in member order.
func (c *Cluster) Endpoints() []string {
	out := make([]string, len(c.members))
	for i, m := range c.members {
		out[i] = m.client
	}
	return out
}

// Endpoint is member i's client URL.
func (c *Cluster) Endpoint(i int) string { return c.members[i].client }

// Size is the number of members.
func (c *Cluster) Size() int { return len(c.members) }

// TLSFiles are the CA and client certificate files; zero without TLS.
func (c *Cluster) TLSFiles() TLSFiles {
	if c.pki == nil {
		return TLSFiles{}
	}
	return c.pki.client
}

// ClientTLS is the client TLS configuration (nil without TLS): a fresh
// copy each call.
func (c *Cluster) ClientTLS() *tls.Config {
	if c.clTLS == nil {
		return nil
	}
	return c.clTLS.Clone()
}

// Username and Password are the credentials of Options (empty without
// authentication).
func (c *Cluster) Username() string { return c.opts.Username }
func (c *Cluster) Password() string { return c.opts.Password }

// RootPassword is the root user's password when authentication is on.
func (c *Cluster) RootPassword() string { return c.rootPw }

// ClientConfig is a client configuration for every endpoint, with the
// cluster's TLS and credentials.
func (c *Cluster) ClientConfig() clientv3.Config {
	return clientv3.Config{
		Endpoints:   c.Endpoints(),
		TLS:         c.ClientTLS(),
		Username:    c.opts.Username,
		Password:    c.opts.Password,
		DialTimeout: 5 * time.Second,
		// The client's own retries log at warn on every member lost;
		// the tests kill members on purpose.
		Logger: zap.NewNop(),
	}
}

// Client is a client of every endpoint, closed when t ends.
func (c *Cluster) Client(t testing.TB) *clientv3.Client {
	t.Helper()
	cl, err := clientv3.New(c.ClientConfig())
	if err != nil {
		t.Fatalf("etcdcluster: client: %v", err)
	}
	t.Cleanup(func() { cl.Close() })
	return cl
}

func (c *Cluster) enableAuth() error {
	cfg := c.ClientConfig()
	cfg.Username, cfg.Password = "", ""
	cl, err := clientv3.New(cfg)
	if err != nil {
		return fmt.Errorf("etcdcluster: client: %w", err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c.rootPw = randHex(16)
	steps := []struct {
		what string
		do   func() error
	}{
		{"add role root", func() error { _, err := cl.RoleAdd(ctx, "root"); return err }},
		{"add user root", func() error { _, err := cl.UserAdd(ctx, "root", c.rootPw); return err }},
		{"grant root", func() error { _, err := cl.UserGrantRole(ctx, "root", "root"); return err }},
		{"add role", func() error { _, err := cl.RoleAdd(ctx, "readwrite-all"); return err }},
		// Every key: from "\x00" with the range end "\x00" (no end).
		{"grant the role every key", func() error {
			_, err := cl.RoleGrantPermission(ctx, "readwrite-all", "\x00", "\x00", clientv3.PermissionType(clientv3.PermReadWrite))
			return err
		}},
		{"add user " + c.opts.Username, func() error { _, err := cl.UserAdd(ctx, c.opts.Username, c.opts.Password); return err }},
		{"grant " + c.opts.Username, func() error { _, err := cl.UserGrantRole(ctx, c.opts.Username, "readwrite-all"); return err }},
		{"enable authentication", func() error { _, err := cl.AuthEnable(ctx); return err }},
	}
	for _, s := range steps {
		if err := s.do(); err != nil {
			return fmt.Errorf("etcdcluster: %s: %w", s.what, err)
		}
	}
	return nil
}

func (c *Cluster) start(i int) error {
	m := c.members[i]
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cmd != nil && !m.exited() {
		return fmt.Errorf("etcdcluster: %s is running", m.name)
	}
	if err := os.MkdirAll(filepath.Dir(m.logPath), 0o700); err != nil {
		return err
	}
	// One log across restarts: a failure's tail shows what came before.
	f, err := os.OpenFile(m.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	m.starts++
	fmt.Fprintf(f, "---- etcdcluster: start %d of %s at %s\n", m.starts, m.name, time.Now().Format(time.RFC3339Nano))
	cmd := exec.Command(c.bin, m.args...)
	cmd.Dir = filepath.Dir(m.logPath)
	cmd.Env = []string{"HOME=" + cmd.Dir, "PATH=" + os.Getenv("PATH"), "TMPDIR=" + cmd.Dir}
	cmd.Stdout, cmd.Stderr = f, f
	// Its own group (a signal to the test's group does not reach it) and
	// killed if the test binary dies.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		f.Close()
		return fmt.Errorf("etcdcluster: start %s: %w", m.name, err)
	}
	done := make(chan struct{})
	m.cmd, m.done, m.waitErr, m.killed = cmd, done, nil, false
	go func() {
		err := cmd.Wait()
		f.Close()
		m.mu.Lock()
		m.waitErr = err
		m.mu.Unlock()
		close(done)
	}()
	return nil
}

// exited: the member's current process has ended (or never started).
// The caller holds m.mu or owns m.
func (m *member) exited() bool {
	if m.done == nil {
		return true
	}
	select {
	case <-m.done:
		return true
	default:
		return false
	}
}

func (m *member) running() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return !m.exited()
}

// Kill sends SIGKILL to member i and waits until it has exited.
func (c *Cluster) Kill(i int) error {
	m := c.members[i]
	m.mu.Lock()
	if m.exited() {
		m.mu.Unlock()
		return fmt.Errorf("etcdcluster: %s is not running", m.name)
	}
	pid, done := m.cmd.Process.Pid, m.done
	m.killed = true
	m.mu.Unlock()
	_ = syscall.Kill(-pid, syscall.SIGCONT) // a paused member dies too
	if err := syscall.Kill(-pid, syscall.SIGKILL); err != nil {
		return fmt.Errorf("etcdcluster: kill %s: %w", m.name, err)
	}
	select {
	case <-done:
		return nil
	case <-time.After(10 * time.Second):
		return fmt.Errorf("etcdcluster: %s did not exit 10s after SIGKILL", m.name)
	}
}

// Pause stops member i with SIGSTOP: it holds its ports and answers
// nothing, as a member on a frozen machine. Resume continues it.
func (c *Cluster) Pause(i int) error { return c.signal(i, syscall.SIGSTOP) }

// Resume continues a paused member with SIGCONT.
func (c *Cluster) Resume(i int) error { return c.signal(i, syscall.SIGCONT) }

func (c *Cluster) signal(i int, sig syscall.Signal) error {
	m := c.members[i]
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.exited() {
		return fmt.Errorf("etcdcluster: %s is not running", m.name)
	}
	return syscall.Kill(-m.cmd.Process.Pid, sig)
}

// Restart starts member i again on its data dir and ports (after Kill).
// It does not wait: WaitHealthy does.
func (c *Cluster) Restart(i int) error { return c.start(i) }

// Running says whether member i's process is up.
func (c *Cluster) Running(i int) bool { return c.members[i].running() }

// WaitHealthy polls every running member's /health until each answers
// healthy (it has a leader and serves a read through the quorum), or the
// timeout passes; a member that exits meanwhile fails it at once.
func (c *Cluster) WaitHealthy(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	hc := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: c.ClientTLS(), DisableKeepAlives: true}}
	for {
		var last error
		up := 0
		for _, m := range c.members {
			m.mu.Lock()
			exited, killed, werr := m.exited(), m.killed, m.waitErr
			m.mu.Unlock()
			if exited {
				if killed {
					continue
				}
				return fmt.Errorf("etcdcluster: %s exited (%v) while waiting for health; its log:\n%s", m.name, werr, tail(m.logPath, 30))
			}
			up++
			if err := probe(hc, m.client+"/health"); err != nil && last == nil {
				last = fmt.Errorf("%s: %w", m.name, err)
			}
		}
		if up == 0 {
			return errors.New("etcdcluster: no member is running")
		}
		if last == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("etcdcluster: not healthy after %s: %v", timeout, last)
		}
		time.Sleep(100 * time.Millisecond) // the poll interval, not a wait for something
	}
}

func probe(hc *http.Client, url string) error {
	resp, err := hc.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"health":"true"`) {
		return fmt.Errorf("GET %s: %d %s", url, resp.StatusCode, strings.TrimSpace(string(body)))
	}
	return nil
}

// Logs is the last n lines of each member's log.
func (c *Cluster) Logs(n int) string {
	var b strings.Builder
	for _, m := range c.members {
		state := "running"
		if !m.running() {
			state = "not running"
		}
		fmt.Fprintf(&b, "---- etcd %s (%s, %s), last %d lines:\n%s\n", m.name, state, m.logPath, n, tail(m.logPath, n))
	}
	return b.String()
}

// Close stops every member (SIGTERM, SIGKILL after 5s).
func (c *Cluster) Close() {
	var wg sync.WaitGroup
	for _, m := range c.members {
		m.mu.Lock()
		if m.exited() {
			m.mu.Unlock()
			continue
		}
		pid, done := m.cmd.Process.Pid, m.done
		m.mu.Unlock()
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = syscall.Kill(-pid, syscall.SIGCONT)
			_ = syscall.Kill(-pid, syscall.SIGTERM)
			select {
			case <-done:
			case <-time.After(5 * time.Second):
				_ = syscall.Kill(-pid, syscall.SIGKILL)
				<-done
			}
		}()
	}
	wg.Wait()
}

func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "(" + err.Error() + ")"
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
