package statetest

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/fleet-agent/fleet-agent/internal/state"
)

// EtcdBinEnv names the etcd binary; make test sets it to the control
// plane cache's (scripts/kube-cache.sh --print-dir)/bin/etcd.
const EtcdBinEnv = "FLEET_AGENT_ETCD"

// Backend is the backend Open uses.
func Backend() string {
	if os.Getenv(BackendEnv) == "etcd" {
		return "etcd"
	}
	return "bbolt"
}

var (
	etcdOnce, syncedOnce sync.Once
	etcdURL, syncedURL   string
	etcdErr, syncedErr   error
	prefixN              atomic.Int64
)

// EtcdEndpoint starts (once per test binary) one etcd member on loopback
// and returns its client URL. The member dies with the test binary
// (Pdeathsig), so no test leaves one running.
func EtcdEndpoint(t testing.TB) string {
	t.Helper()
	etcdOnce.Do(func() { etcdURL, etcdErr = startEtcd(false) })
	if etcdErr != nil {
		t.Fatal(etcdErr)
	}
	return etcdURL
}

// EtcdEndpointSynced is another member, started once, that syncs every
// commit to disk as a production member does: for benchmarks that compare
// etcd with a bbolt file, which syncs too.
func EtcdEndpointSynced(t testing.TB) string {
	t.Helper()
	syncedOnce.Do(func() { syncedURL, syncedErr = startEtcd(true) })
	if syncedErr != nil {
		t.Fatal(syncedErr)
	}
	return syncedURL
}

// EtcdOptions are the options of a store on a prefix of the test etcd
// server that no other store of this test binary uses.
func EtcdOptions(t testing.TB) state.EtcdOptions {
	t.Helper()
	return state.EtcdOptions{
		Endpoints: []string{EtcdEndpoint(t)},
		Prefix:    fmt.Sprintf("/test-%d/%d", os.Getpid(), prefixN.Add(1)),
		Name:      "test",
		Now:       fixedNow,
	}
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func startEtcd(fsync bool) (string, error) {
	bin := os.Getenv(EtcdBinEnv)
	if bin == "" {
		if p, err := exec.LookPath("etcd"); err == nil {
			bin = p
		}
	}
	if bin == "" {
		bin = cachedEtcd()
	}
	if bin == "" {
		return "", fmt.Errorf("statetest: no etcd binary: set %s to the control plane cache's etcd (make test does: $(scripts/kube-cache.sh --print-dir)/bin/etcd; build the cache with make kube)", EtcdBinEnv)
	}
	dir, err := os.MkdirTemp("", "statetest-etcd-")
	if err != nil {
		return "", err
	}
	cport, err := freePort()
	if err != nil {
		return "", err
	}
	pport, err := freePort()
	if err != nil {
		return "", err
	}
	curl := fmt.Sprintf("http://127.0.0.1:%d", cport)
	purl := fmt.Sprintf("http://127.0.0.1:%d", pport)
	logf, err := os.Create(filepath.Join(dir, "etcd.log"))
	if err != nil {
		return "", err
	}
	args := []string{"--name", "t", "--data-dir", filepath.Join(dir, "data"),
		"--listen-client-urls", curl, "--advertise-client-urls", curl,
		"--listen-peer-urls", purl, "--initial-advertise-peer-urls", purl,
		"--initial-cluster", "t=" + purl, "--log-level", "warn"}
	if !fsync {
		// Tests commit a lot; fsync per commit would make them slow for
		// nothing, a lost test store costs nothing.
		args = append(args, "--unsafe-no-fsync")
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if err := cmd.Start(); err != nil {
		return "", fmt.Errorf("statetest: start %s: %w", bin, err)
	}
	go func() { _ = cmd.Wait(); _ = os.RemoveAll(dir) }()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{curl}, DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return "", err
	}
	defer cli.Close()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := cli.Get(ctx, "health")
		cancel()
		if err == nil {
			return curl, nil
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(filepath.Join(dir, "etcd.log"))
			return "", fmt.Errorf("statetest: etcd did not answer in 30s: %v\n%s", err, tail(string(log)))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// cachedEtcd asks the control plane cache's script where its etcd is, so
// that a plain go test finds it as make test does.
func cachedEtcd() string {
	dir, err := os.Getwd()
	if err != nil {
		return ""
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "scripts", "kube-cache.sh")); err == nil {
			break
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return ""
		}
		dir = parent
	}
	out, err := exec.Command("bash", filepath.Join(dir, "scripts", "kube-cache.sh"), "--print-dir").Output()
	if err != nil {
		return ""
	}
	bin := filepath.Join(strings.TrimSpace(string(out)), "bin", "etcd")
	if _, err := os.Stat(bin); err != nil {
		return ""
	}
	return bin
}

func tail(s string) string {
	lines := strings.Split(s, "\n")
	if len(lines) > 20 {
		lines = lines[len(lines)-20:]
	}
	return strings.Join(lines, "\n")
}
