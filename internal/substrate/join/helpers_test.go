package join

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/fleet-agent/fleet-agent/internal/clock"
	"github.com/fleet-agent/fleet-agent/internal/config"
	"github.com/fleet-agent/fleet-agent/internal/state"
	"github.com/fleet-agent/fleet-agent/internal/state/statetest"
)

// t0 is the fake clocks' start.
var t0 = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

// logFile is a log sink many goroutines write: a file, whose every Write
// is one append, read back whole.
type logFile struct{ f *os.File }

func newLogFile(t *testing.T) *logFile {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(t.TempDir(), "log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return &logFile{f: f}
}

func (l *logFile) Write(p []byte) (int, error) { return l.f.Write(p) }

func (l *logFile) String() string {
	b, _ := os.ReadFile(l.f.Name())
	return string(b)
}

// counting are metrics a test reads.
type counting struct {
	mu      sync.Mutex
	joined  map[string]int
	refused map[string]int // "route code"
}

func newCounting() *counting { return &counting{joined: map[string]int{}, refused: map[string]int{}} }

func (c *counting) Joined(pool string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.joined[pool]++
}

func (c *counting) Refused(route, code string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.refused[route+" "+code]++
}

func (c *counting) joinedN(pool string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.joined[pool]
}

func (c *counting) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return fmt.Sprintf("joined %v, refused %v", c.joined, c.refused)
}

func (c *counting) refusedN(key string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.refused[key]
}

// fixture is a state file, a store over it, and (once started) a listener.
type fixture struct {
	st      *state.Store
	store   *Store
	clock   clock.Clock
	logs    *logFile
	metrics *counting
	lis     *Listener
	url     string
	addr    string
}

func newFixture(t *testing.T, c clock.Clock) *fixture {
	t.Helper()
	st := statetest.Open(t)
	logs := newLogFile(t)
	log := zerolog.New(logs).Level(zerolog.DebugLevel)
	return &fixture{st: st, store: NewStore(st, StoreOptions{Clock: c, Log: log}), clock: c, logs: logs, metrics: newCounting()}
}

func (f *fixture) log() zerolog.Logger { return zerolog.New(f.logs).Level(zerolog.DebugLevel) }

// mint returns a fresh token for waiting.
func (f *fixture) mint(t *testing.T, pool string, waiting ...string) string {
	t.Helper()
	tok, minted, err := f.store.Token(t.Context(), pool, waiting, true)
	if err != nil || !minted || tok == "" {
		t.Fatalf("Token: %q %v %v", tok, minted, err)
	}
	return tok
}

// serve starts the listener on addr ("127.0.0.1:0" for any port) until the
// test ends or stop is called; cert nil serves plain HTTP.
func (f *fixture) serve(t *testing.T, addr string, cert *testCert, opts ListenerOptions) (stop func()) {
	t.Helper()
	opts.Store, opts.Log, opts.Metrics = f.store, f.log(), f.metrics
	if opts.Clock == nil {
		opts.Clock = f.clock
	}
	f.lis = NewListener(opts)
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	cfg := config.Join{Listen: addr, Insecure: cert == nil}
	scheme := "http"
	if cert != nil {
		cfg.TLSCert, cfg.TLSKey = cert.certFile, cert.keyFile
		scheme = "https"
	}
	f.addr = ln.Addr().String()
	f.url = scheme + "://" + f.addr + "/"
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.lis.ServeOn(ctx, ln, cfg) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("ServeOn: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// testCert is a certificate made for a test, in files, with its pin.
type testCert struct {
	certFile, keyFile string
	cert              *x509.Certificate
	key               *ecdsa.PrivateKey
	pin               string
	pool              *x509.CertPool
}

// newCert makes a certificate for 127.0.0.1 and localhost, signed by ca
// (nil: self-signed), and writes it (with ca's certificate after it, as a
// chain) and its key under dir.
func newCert(t *testing.T, dir, name string, ca *testCert, isCA bool) *testCert {
	t.Helper()
	return newCertFor(t, dir, name, ca, isCA, []string{"localhost"}, []net.IP{net.ParseIP("127.0.0.1")})
}

// newCertFor is newCert for the names and addresses given.
func newCertFor(t *testing.T, dir, name string, ca *testCert, isCA bool, dns []string, ips []net.IP) *testCert {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial, _ := rand.Int(rand.Reader, big.NewInt(1<<62))
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:     dns,
		IPAddresses:  ips,
	}
	if isCA {
		tmpl.IsCA, tmpl.BasicConstraintsValid = true, true
		tmpl.KeyUsage |= x509.KeyUsageCertSign
		tmpl.DNSNames, tmpl.IPAddresses, tmpl.ExtKeyUsage = nil, nil, nil
	}
	parent, signer := tmpl, any(key)
	if ca != nil {
		parent, signer = ca.cert, ca.key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, signer)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	chain := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	if ca != nil {
		chain = append(chain, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.cert.Raw})...)
	}
	tc := &testCert{certFile: filepath.Join(dir, name+".crt"), keyFile: filepath.Join(dir, name+".key"), cert: cert, key: key, pin: Pin(cert), pool: x509.NewCertPool()}
	tc.pool.AddCert(cert)
	if err := os.WriteFile(tc.certFile, chain, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(tc.keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		t.Fatal(err)
	}
	return tc
}

// client is an HTTP client that trusts cert (nil: plain HTTP), dialling
// from the loopback address from ("" for any).
func client(cert *testCert, from string) *http.Client {
	d := &net.Dialer{Timeout: 5 * time.Second}
	if from != "" {
		d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(from)}
	}
	tr := &http.Transport{DialContext: d.DialContext, ForceAttemptHTTP2: true, MaxIdleConnsPerHost: 64}
	if cert != nil {
		tr.TLSClientConfig = &tls.Config{RootCAs: cert.pool}
	}
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}

// post sends body to the listener and returns the status, the body and the
// response.
func post(t *testing.T, c *http.Client, url, body, bearer string) (int, string, *http.Response) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	_, _ = b.ReadFrom(resp.Body)
	return resp.StatusCode, b.String(), resp
}

// statuses records what a daemon says.
type statuses struct {
	mu  sync.Mutex
	all []Status
	ch  chan struct{}
}

func newStatuses() *statuses { return &statuses{ch: make(chan struct{}, 1)} }

func (s *statuses) add(st Status) {
	s.mu.Lock()
	s.all = append(s.all, st)
	s.mu.Unlock()
	select {
	case s.ch <- struct{}{}:
	default:
	}
}

// wait returns the first status of phase reported from index from on.
func (s *statuses) wait(t *testing.T, from int, phase Phase, within time.Duration) (Status, int) {
	t.Helper()
	deadline := time.After(within)
	for {
		s.mu.Lock()
		for i := from; i < len(s.all); i++ {
			if s.all[i].Phase == phase {
				st := s.all[i]
				s.mu.Unlock()
				return st, i + 1
			}
		}
		var seen []string
		for _, st := range s.all {
			seen = append(seen, string(st.Phase)+": "+st.Message)
		}
		s.mu.Unlock()
		select {
		case <-s.ch:
		case <-deadline:
			t.Fatalf("no %s status within %s; saw:\n%s", phase, within, strings.Join(seen, "\n"))
		}
	}
}

func (s *statuses) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var lines []string
	for _, st := range s.all {
		lines = append(lines, string(st.Phase)+": "+st.Message)
	}
	return strings.Join(lines, "\n")
}

// retries lists the waits of the statuses of phase from index from on.
func (s *statuses) retries(from int, phase Phase) []time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []time.Duration
	for _, st := range s.all[from:] {
		if st.Phase == phase {
			out = append(out, st.Retry)
		}
	}
	return out
}

func (s *statuses) count(phase Phase) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, st := range s.all {
		if st.Phase == phase {
			n++
		}
	}
	return n
}

// nodeFiles writes the ConfigMap's files as the kubelet mounts them.
func nodeFiles(t *testing.T, dir, pool, joinURL string, pins []string) string {
	t.Helper()
	cfg := filepath.Join(dir, "config")
	if err := os.MkdirAll(cfg, 0o755); err != nil {
		t.Fatal(err)
	}
	pinsJSON := "[]"
	if len(pins) > 0 {
		pinsJSON = `["` + strings.Join(pins, `","`) + `"]`
	}
	for k, v := range map[string]string{KeyPoolID: pool, KeyJoinURL: joinURL, KeyCAPins: pinsJSON} {
		if err := os.WriteFile(filepath.Join(cfg, k), []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return cfg
}

func writeToken(t *testing.T, path, token string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(token), 0o644); err != nil {
		t.Fatal(err)
	}
}

// runDaemon starts a daemon with fast timings until the returned stop is
// called (or the test ends).
func runDaemon(t *testing.T, o DaemonOptions) (stop func()) {
	t.Helper()
	if o.MinBackoff == 0 {
		o.MinBackoff, o.MaxBackoff = 10*time.Millisecond, 100*time.Millisecond
	}
	if o.Poll == 0 {
		o.Poll = 20 * time.Millisecond
	}
	if o.RequestTimeout == 0 {
		o.RequestTimeout = 2 * time.Second
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- RunDaemon(ctx, o) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("RunDaemon: %v", err)
				}
			case <-time.After(5 * time.Second):
				t.Error("RunDaemon did not return after its context ended")
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// tlsClient is a TLS client over conn that takes any certificate (the test
// looks at which one).
func tlsClient(conn net.Conn) *tls.Conn {
	return tls.Client(conn, &tls.Config{InsecureSkipVerify: true, ServerName: "localhost"})
}

// configJoin is substrate.join with TLS when cert is given, else insecure.
func configJoin(listen, cert, key string) config.Join {
	return config.Join{Listen: listen, TLSCert: cert, TLSKey: key, Insecure: cert == ""}
}

// offByOne is s with its first character changed: one character off s and
// never s itself, whatever s starts with.
func offByOne(s string) string {
	if s[0] == 'x' {
		return "y" + s[1:]
	}
	return "x" + s[1:]
}
