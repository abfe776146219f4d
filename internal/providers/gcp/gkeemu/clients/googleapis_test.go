package clients

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fleet-agent/fleet-agent/internal/providers/gcp/gkeemu"
	"github.com/fleet-agent/fleet-agent/internal/providers/gcp/gkeemu/wirecheck"
)

// googleHosts are the real host names the Node client reaches; the test's
// proxy sends them to the emulator and refuses every other.
var googleHosts = []string{"oauth2.googleapis.com", "container.googleapis.com"}

const installGoogleapis = `googleapis (npm) is not installed where the suite looks (FLEET_NODE_MODULES, else ~/.cache/fleet-agent/npm/node_modules). Install it with:
  npm install --prefix ~/.cache/fleet-agent/npm --no-audit --no-fund googleapis@188.0.0
(node 20 or newer on PATH).`

func nodeModules(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("FLEET_NODE_MODULES")
	if dir == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			t.Fatal(installGoogleapis)
		}
		dir = filepath.Join(home, ".cache", "fleet-agent", "npm", "node_modules")
	}
	if _, err := os.Stat(filepath.Join(dir, "googleapis", "package.json")); err != nil {
		t.Fatal(installGoogleapis)
	}
	return dir
}

// googleTLS serves the emulator under Google's host names with a
// certificate of a CA made for the test; it returns the CA's PEM.
func googleTLS(t *testing.T, emu *gkeemu.Emulator) (*httptest.Server, []byte) {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "gkeemu client suite CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	leafKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	leafTmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: googleHosts[0]}, DNSNames: googleHosts,
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour), KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	leafDER, err := x509.CreateCertificate(rand.Reader, leafTmpl, ca, &leafKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(emu)
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{leafDER}, PrivateKey: leafKey}}}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})
}

// connectProxy is an HTTP CONNECT proxy that tunnels Google's hosts to
// target and refuses the rest, so nothing the client sends leaves the
// machine.
func connectProxy(t *testing.T, target string) string {
	t.Helper()
	var mu sync.Mutex
	var refused []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host, _, _ := net.SplitHostPort(r.Host)
		ok := r.Method == http.MethodConnect
		if ok {
			ok = false
			for _, h := range googleHosts {
				ok = ok || h == host
			}
		}
		if !ok {
			mu.Lock()
			refused = append(refused, r.Method+" "+r.Host)
			mu.Unlock()
			http.Error(w, "the suite's proxy reaches Google's API hosts only", http.StatusForbidden)
			return
		}
		up, err := net.Dial("tcp", target)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		hj, _ := w.(http.Hijacker)
		conn, rw, err := hj.Hijack()
		if err != nil {
			up.Close()
			return
		}
		_, _ = conn.Write([]byte("HTTP/1.1 200 Connection established\r\n\r\n"))
		go func() {
			_, _ = io.Copy(up, rw)
			up.Close()
		}()
		_, _ = io.Copy(conn, up)
		conn.Close()
	}))
	t.Cleanup(func() {
		srv.Close()
		mu.Lock()
		defer mu.Unlock()
		if len(refused) > 0 {
			t.Errorf("the Node client tried hosts other than Google's API hosts: %v", refused)
		}
	})
	return srv.URL
}

type step struct {
	Step  string         `json:"step"`
	OK    bool           `json:"ok"`
	Value any            `json:"value"`
	Error map[string]any `json:"error"`
}

// TestGoogleapisNode runs Google's Node client (googleapis from npm, with
// google-auth-library's JWT client and a service account key file) against
// the emulator, reached under Google's real host names: create a cluster
// with initialNodeCount and nodeConfig, wait on its operation, get, list,
// create a node pool, resize it, get it, a missing cluster's 404, delete.
func TestGoogleapisNode(t *testing.T) {
	modules := nodeModules(t)
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatal("node is not on PATH: install Node.js 20 or newer (Debian: apt-get install -y nodejs npm), then " + installGoogleapis)
	}
	opts := gkeemu.DefaultOptions()
	opts.Steps = gkeemu.Steps{Cluster: 2, NodePool: 1, Update: 1, Delete: 1}
	emu, err := gkeemu.Start(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(emu.Close)
	wirecheck.Register(t, emu)
	key, err := emu.AddServiceAccount(account, project)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	keyFile := filepath.Join(dir, "key.json")
	caFile := filepath.Join(dir, "ca.pem")
	tlsSrv, caPEM := googleTLS(t, emu)
	if err := os.WriteFile(keyFile, key, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(caFile, caPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	proxy := connectProxy(t, tlsSrv.Listener.Addr().String())
	script, _ := filepath.Abs("testdata/googleapis-flow.js")

	ctx, cancel := context.WithTimeout(t.Context(), 120*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, script)
	cmd.Env = []string{
		"PATH=" + os.Getenv("PATH"), "HOME=" + dir, "NODE_PATH=" + modules,
		"HTTPS_PROXY=" + proxy, "NODE_EXTRA_CA_CERTS=" + caFile,
		"GKE_KEY_FILE=" + keyFile, "GKE_PROJECT=" + project, "GKE_ZONE=" + zone,
	}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("node: %v\nstdout:\n%s\nstderr:\n%s", err, out.String(), errb.String())
	}
	steps := map[string]step{}
	var order []string
	sc := bufio.NewScanner(&out)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var s step
		if err := json.Unmarshal(sc.Bytes(), &s); err != nil {
			t.Fatalf("node printed %q: %v", sc.Text(), err)
		}
		steps[s.Step] = s
		order = append(order, s.Step)
	}
	t.Logf("googleapis (Node) ran: %s", strings.Join(order, ", "))
	checks := []struct {
		step string
		path []any
		want string
	}{
		{"create", []any{"operationType"}, `"CREATE_CLUSTER"`},
		{"create", []any{"status"}, `"RUNNING"`},
		{"wait-create", []any{"status"}, `"DONE"`},
		{"get", []any{"status"}, `"RUNNING"`},
		{"get", []any{"nodePools", 0, "name"}, `"default-pool"`},
		{"get", []any{"nodePools", 0, "config", "machineType"}, `"e2-standard-2"`},
		{"get", []any{"resourceLabels"}, `{"team":"node"}`},
		{"list", []any{"clusters", 0, "name"}, `"n1"`},
		{"wait-pool", []any{"operationType"}, `"CREATE_NODE_POOL"`},
		{"wait-pool", []any{"status"}, `"DONE"`},
		{"wait-resize", []any{"operationType"}, `"SET_NODE_POOL_SIZE"`},
		{"get-pool", []any{"config", "machineType"}, `"e2-standard-4"`},
		{"get-pool", []any{"upgradeSettings", "maxSurge"}, `1`},
		{"get-missing", []any{"code"}, `404`},
		{"get-missing", []any{"status"}, `"NOT_FOUND"`},
		{"wait-delete", []any{"operationType"}, `"DELETE_CLUSTER"`},
		{"wait-delete", []any{"status"}, `"DONE"`},
		{"list-after", []any{"clusters"}, `[]`},
	}
	for _, c := range checks {
		s, ok := steps[c.step]
		if !ok {
			t.Errorf("step %s did not run (stderr: %s)", c.step, errb.String())
			continue
		}
		v := s.Value
		if !s.OK {
			v = s.Error
		}
		if got := js(dig(v, c.path...)); got != c.want {
			t.Errorf("%s %v = %s, want %s", c.step, c.path, got, c.want)
		}
	}
	if s := steps["fatal"]; s.Step != "" {
		t.Errorf("the flow stopped: %s", js(s.Error))
	}
	var tokens, api int
	for _, x := range emu.Exchanges() {
		switch {
		case x.MethodID == "oauth2.token" && x.Status == 200:
			tokens++
		case strings.HasPrefix(x.MethodID, "container."):
			api++
		}
	}
	if tokens == 0 || api == 0 {
		t.Errorf("the emulator saw %d tokens minted and %d API calls", tokens, api)
	}
}
