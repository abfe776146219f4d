// Package kubeplane is a real Kubernetes control plane for tests: etcd,
// kube-apiserver, kube-controller-manager, kube-scheduler and kwok, started
// from the binaries scripts/kube-cache.sh (`make kube`) builds once per
// machine, on loopback, on free ports, in a temporary directory. kwok plays
// every kubelet: it marks the Nodes it manages Ready, renews their leases,
// and runs (in status only) the Pods the scheduler binds to them, so a
// DaemonSet really gets one running Pod per matching Node, a cordon really
// makes a Node unschedulable, and a deleted owner's Pods really go, each by
// the controller that does it in a cluster.
//
// Tokens are checked the way managed clusters check the ones their cloud
// minted: the apiserver's webhook token authenticator calls a TokenReview
// endpoint this package serves, which forwards to whatever handler the test
// set with SetTokenReviewer (a cloud emulator). Expiry is real and bounded:
// kube-apiserver keeps every successful bearer-token authentication for
// SuccessCacheTTL (10 s, built in, no flag), so a token the reviewer stops
// accepting is refused at most 10 s after it was last reviewed. The
// webhook's own cache (Options.TokenCacheTTL) is off by default: with it on,
// refusals are cached as well, and a token refused before its reviewer
// knew it stays refused for that long.
//
// A plane takes a few seconds to start and about half a gigabyte of memory,
// so a test binary normally starts one in TestMain and its tests share it:
//
//	var plane *kubeplane.Plane
//
//	func TestMain(m *testing.M) { os.Exit(kubeplane.Main(m, kubeplane.Options{}, &plane)) }
//
// Sharing rules: namespaced objects go in a namespace of the test's own
// (plane.Namespace(t)); Nodes are cluster-scoped, so a test names its Nodes
// and selects them by labels unique to it (plane.Unique(t) gives a prefix),
// and removes them when done (AddNodeT does that when the test ends);
// plane.Reset clears everything tests made, for a test
// that needs an empty cluster. A test that cannot get the binaries fails,
// saying to run `make kube`; it never skips.
//
// Only tests import this package.
package kubeplane

import (
	"bytes"
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// DefaultControllers are the kube-controller-manager controllers a plane
// runs (by their full names; the short aliases daemonset, nodelifecycle,
// garbagecollector, ... name the same): what makes DaemonSets, cordons,
// owner deletion and namespace deletion behave as in a cluster.
//   - daemonset-controller: one Pod per matching Node (it only sets node
//     affinity; the scheduler binds).
//   - node-lifecycle-controller: lifts the not-ready taint once kwok reports
//     a Node Ready, and taints a cordoned Node unschedulable; without it
//     new Nodes stay tainted and a DaemonSet wants no Pods.
//   - taint-eviction-controller: evicts Pods from NoExecute-tainted Nodes.
//   - garbage-collector-controller: deletes what a deleted owner leaves.
//   - namespace-controller: empties and finalizes a deleted namespace.
//   - serviceaccount-controller: each namespace's default ServiceAccount,
//     without which no Pod is admitted.
//   - root-ca-certificate-publisher-controller: kube-root-ca.crt in each
//     namespace, which Pods mounting the API's CA expect.
//   - pod-garbage-collector-controller: deletes Pods bound to a Node that no
//     longer exists (after its 40 s quarantine), as when a machine is gone.
var DefaultControllers = []string{
	"daemonset-controller", "node-lifecycle-controller", "taint-eviction-controller",
	"garbage-collector-controller", "namespace-controller", "serviceaccount-controller",
	"root-ca-certificate-publisher-controller", "pod-garbage-collector-controller",
}

// SuccessCacheTTL is how long kube-apiserver caches a successful bearer
// token authentication, whatever the authenticator
// (pkg/kubeapiserver/options TokenSuccessCacheTTL; no flag sets it): the
// bound on how long a revoked or expired webhook token keeps working.
const SuccessCacheTTL = 10 * time.Second

// Options tune a plane. The zero value is what most tests want.
type Options struct {
	// Controllers replaces DefaultControllers (kube-controller-manager
	// --controllers).
	Controllers []string
	// TokenCacheTTL is --authentication-token-webhook-cache-ttl: how long the
	// apiserver keeps a TokenReview answer, accepted or refused. Zero (the
	// default) bypasses that cache: every request the apiserver's own
	// SuccessCacheTTL does not answer is reviewed, and a refused token is
	// never remembered. A revoked token is then refused within
	// SuccessCacheTTL; with a longer TTL here, within this TTL (managed
	// clusters use minutes).
	TokenCacheTTL time.Duration
	// StartTimeout bounds the start; zero means 2 minutes (a plane starts in
	// seconds, but this machine's two cores are shared).
	StartTimeout time.Duration
	// APIServerArgs are appended to kube-apiserver's flags.
	APIServerArgs []string
}

// Plane is a running control plane. Its methods are safe for concurrent use.
type Plane struct {
	cache   Cache
	dir     string
	ownDir  bool
	pki     *pki
	hook    *webhook
	procs   []*proc
	url     string
	cfg     *rest.Config
	client  kubernetes.Interface
	started time.Duration
	readyAt []string // "component at 1.2s", in the order they became ready

	closeOnce sync.Once
	seq       atomic.Int64
}

// Start starts a plane for one test and stops it when the test ends; on
// failure the components' logs are printed. It fails the test (never
// skips) when the cache is not built.
func Start(t testing.TB, opts Options) *Plane {
	t.Helper()
	p, err := startFresh(t.TempDir, false, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(p.Logs(80))
		}
		p.Close()
	})
	return p
}

// New starts a plane outside a test (in TestMain): its directory is a new
// temporary one, removed by Close.
func New(opts Options) (*Plane, error) {
	var made []string
	p, err := startFresh(func() string {
		dir, err := os.MkdirTemp("", "kubeplane-")
		if err != nil {
			dir = filepath.Join(os.TempDir(), "kubeplane-unmade")
		}
		made = append(made, dir)
		return dir
	}, true, opts)
	for _, d := range made {
		if p == nil || d != p.dir {
			_ = os.RemoveAll(d)
		}
	}
	return p, err
}

// portAttempts is how many times a plane is started afresh when one of its
// components found its port taken.
const portAttempts = 3

// startFresh starts a plane in a directory dir gives, again in a new one
// when a component could not bind the port picked for it. FreePorts picks
// ports by binding and releasing them, and between the release and the
// component's bind the kernel may hand one to another process (an outgoing
// connection's source port comes from the same range): with several planes
// and busy tests on one machine that happens, and is no failure of the
// plane.
func startFresh(dir func() string, ownDir bool, opts Options) (p *Plane, err error) {
	for range portAttempts {
		p, err = start(dir(), ownDir, opts)
		if err == nil || !strings.Contains(err.Error(), "address already in use") {
			return p, err
		}
	}
	return nil, err
}

// Main is a TestMain body for a test binary sharing one plane: it starts the
// plane into *p, runs the tests, prints the components' logs if any test
// failed, stops the plane and returns the exit code. A plane that does not
// start fails the whole binary with the reason.
func Main(m *testing.M, opts Options, p **Plane) int {
	plane, err := New(opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	*p = plane
	code := m.Run()
	if code != 0 {
		fmt.Fprintln(os.Stderr, plane.Logs(80))
	}
	plane.Close()
	return code
}

// Lazy is a test binary's one plane, started by the first test that asks
// for it: a package whose most tests need no API server does not pay a
// plane's seconds and half a gigabyte for them. TestMain runs the tests
// through Run, which stops the plane:
//
//	var shared kubeplane.Lazy
//
//	func TestMain(m *testing.M) { os.Exit(shared.Run(m)) }
type Lazy struct {
	Options Options
	// LogLines is how many lines of each component's log Run prints when a
	// test failed (default 60).
	LogLines int

	once  sync.Once
	plane *Plane
	err   error
}

// Plane starts the plane on first use; a test that cannot have it fails
// (the error says how to build the cache), it never skips.
func (l *Lazy) Plane(t testing.TB) *Plane {
	t.Helper()
	l.once.Do(func() { l.plane, l.err = New(l.Options) })
	if l.err != nil {
		t.Fatal(l.err)
	}
	return l.plane
}

// Run runs the tests, prints the components' logs if one failed, stops the
// plane if a test started it, and returns the exit code.
func (l *Lazy) Run(m *testing.M) int {
	code := m.Run()
	if l.plane != nil {
		if code != 0 {
			fmt.Fprintln(os.Stderr, l.plane.Logs(cmp.Or(l.LogLines, 60)))
		}
		l.plane.Close()
	}
	return code
}

func start(dir string, ownDir bool, opts Options) (_ *Plane, err error) {
	began := time.Now()
	cache, err := FindCache()
	if err != nil {
		return nil, err
	}
	timeout := opts.StartTimeout
	if timeout <= 0 {
		timeout = 2 * time.Minute
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()

	p := &Plane{cache: cache, dir: dir, ownDir: ownDir}
	defer func() {
		if err != nil {
			err = fmt.Errorf("%w\n%s", err, p.Logs(40))
			p.Close()
		}
	}()
	if p.pki, err = newPKI(dir); err != nil {
		return nil, fmt.Errorf("kubeplane: keys: %w", err)
	}
	if p.hook, err = startWebhook(p.pki.webhookTLS); err != nil {
		return nil, fmt.Errorf("kubeplane: token webhook: %w", err)
	}
	ports, err := FreePorts(6)
	if err != nil {
		return nil, err
	}
	etcdPort, peerPort, apiPort, kcmPort, schedPort, kwokPort := ports[0], ports[1], ports[2], ports[3], ports[4], ports[5]

	etcdURL := "http://127.0.0.1:" + strconv.Itoa(etcdPort)
	peerURL := "http://127.0.0.1:" + strconv.Itoa(peerPort)
	etcd, err := p.run("etcd",
		"--name=kubeplane",
		"--data-dir="+filepath.Join(dir, "etcd"),
		"--listen-client-urls="+etcdURL, "--advertise-client-urls="+etcdURL,
		"--listen-peer-urls="+peerURL, "--initial-advertise-peer-urls="+peerURL,
		"--initial-cluster=kubeplane="+peerURL,
		// A test cluster is thrown away: durability costs fsyncs for nothing.
		"--unsafe-no-fsync",
		"--log-level=warn",
	)
	if err != nil {
		return nil, err
	}
	plain := &http.Client{Timeout: 2 * time.Second}
	if err := waitFor(ctx, etcd, func() error { return probe(plain, etcdURL+"/health", "", `"health":"true"`) }); err != nil {
		return nil, err
	}
	p.ready("etcd", began)

	p.url = "https://127.0.0.1:" + strconv.Itoa(apiPort)
	webhookCfg := filepath.Join(dir, "webhook.kubeconfig")
	if err := writeFile(webhookCfg, kubeconfig(p.hook.url(), p.pki.caFile, ""), 0o600); err != nil {
		return nil, err
	}
	apiArgs := []string{
		"--etcd-servers=" + etcdURL,
		"--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(apiPort),
		"--cert-dir=" + filepath.Join(dir, "apiserver"),
		"--tls-cert-file=" + p.pki.serverCert, "--tls-private-key-file=" + p.pki.serverKey,
		"--token-auth-file=" + p.pki.tokensFile,
		// Published in kube-system/extension-apiserver-authentication, where
		// the controller-manager and scheduler look for it (they log an
		// error a second without it). No client certificate is issued.
		"--client-ca-file=" + p.pki.caFile,
		"--authentication-token-webhook-config-file=" + webhookCfg,
		"--authentication-token-webhook-version=v1",
		"--authentication-token-webhook-cache-ttl=" + opts.TokenCacheTTL.String(),
		"--authorization-mode=RBAC",
		"--service-account-issuer=https://kubernetes.default.svc",
		"--service-account-key-file=" + p.pki.saPub,
		"--service-account-signing-key-file=" + p.pki.saKey,
		"--service-cluster-ip-range=10.96.0.0/24",
		// No kubelets or Services to reach: the kubernetes Service's
		// endpoints would point at 127.0.0.1 and help nobody.
		"--endpoint-reconciler-type=none",
		"--allow-privileged=true",
		"--profiling=false",
	}
	apiserver, err := p.run("kube-apiserver", append(apiArgs, opts.APIServerArgs...)...)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(p.pki.caPEM)
	verified := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	if err := waitFor(ctx, apiserver, func() error {
		return probe(verified, p.url+"/readyz", p.pki.adminToken, "ok")
	}); err != nil {
		return nil, err
	}
	p.ready("kube-apiserver", began)

	p.cfg = &rest.Config{
		Host:            p.url,
		BearerToken:     p.pki.adminToken,
		TLSClientConfig: rest.TLSClientConfig{CAData: p.pki.caPEM},
		QPS:             200,
		Burst:           400,
		UserAgent:       "kubeplane",
	}
	if p.client, err = kubernetes.NewForConfig(p.cfg); err != nil {
		return nil, err
	}

	kcmCfg, schedCfg, kwokCfg := filepath.Join(dir, "kcm.kubeconfig"), filepath.Join(dir, "scheduler.kubeconfig"), filepath.Join(dir, "kwok.kubeconfig")
	for path, tok := range map[string]string{kcmCfg: p.pki.kcmToken, schedCfg: p.pki.schedToken, kwokCfg: p.pki.kwokToken} {
		if err := writeFile(path, kubeconfig(p.url, p.pki.caFile, tok), 0o600); err != nil {
			return nil, err
		}
	}
	controllers := opts.Controllers
	if len(controllers) == 0 {
		controllers = DefaultControllers
	}
	kcm, err := p.run("kube-controller-manager",
		"--kubeconfig="+kcmCfg, "--authentication-kubeconfig="+kcmCfg, "--authorization-kubeconfig="+kcmCfg,
		"--bind-address=127.0.0.1", "--secure-port="+strconv.Itoa(kcmPort),
		"--cert-dir="+filepath.Join(dir, "kcm"),
		"--controllers="+strings.Join(controllers, ","),
		"--leader-elect=false",
		// Each controller as its own service account, bound to its own
		// bootstrap role, as in a cluster: a controller that lacks a
		// permission fails here as it would there.
		"--use-service-account-credentials=true",
		"--root-ca-file="+p.pki.caFile,
		"--service-account-private-key-file="+p.pki.saKey,
		// How often the node lifecycle controller looks at Nodes: 1 s
		// instead of 5 s, so a new Node loses its not-ready taint quickly.
		"--node-monitor-period=1s",
	)
	if err != nil {
		return nil, err
	}
	sched, err := p.run("kube-scheduler",
		"--kubeconfig="+schedCfg, "--authentication-kubeconfig="+schedCfg, "--authorization-kubeconfig="+schedCfg,
		"--bind-address=127.0.0.1", "--secure-port="+strconv.Itoa(schedPort),
		"--cert-dir="+filepath.Join(dir, "scheduler"),
		"--leader-elect=false",
	)
	if err != nil {
		return nil, err
	}
	kwokConfig, err := kwokStages(cache, dir)
	if err != nil {
		return nil, err
	}
	kwokURL := "http://127.0.0.1:" + strconv.Itoa(kwokPort)
	kwok, err := p.run("kwok",
		"--kubeconfig="+kwokCfg,
		"--config="+kwokConfig,
		"--manage-all-nodes=false",
		"--manage-nodes-with-annotation-selector="+KwokAnnotation+"=fake",
		// Leases renewed every 10 s (a quarter of 40 s), well inside the
		// node lifecycle controller's 50 s grace period.
		"--node-lease-duration-seconds=40",
		"--server-address=127.0.0.1:"+strconv.Itoa(kwokPort),
		"--cidr=10.244.0.0/16",
		"--node-ip=127.0.0.1",
	)
	if err != nil {
		return nil, err
	}
	// The controller-manager and the scheduler serve HTTPS with a
	// certificate each made for itself; this loopback health probe does
	// not verify it (nothing else talks to them).
	selfSigned := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	if err := waitFor(ctx, kcm, func() error {
		return probe(selfSigned, "https://127.0.0.1:"+strconv.Itoa(kcmPort)+"/healthz", "", "ok")
	}); err != nil {
		return nil, err
	}
	p.ready("kube-controller-manager", began)
	if err := waitFor(ctx, sched, func() error {
		return probe(selfSigned, "https://127.0.0.1:"+strconv.Itoa(schedPort)+"/healthz", "", "ok")
	}); err != nil {
		return nil, err
	}
	p.ready("kube-scheduler", began)
	if err := waitFor(ctx, kwok, func() error { return probe(plain, kwokURL+"/healthz", "", "ok") }); err != nil {
		return nil, err
	}
	p.ready("kwok", began)
	// Healthy is not working: the default ServiceAccount of "default" is
	// made by the serviceaccount controller running under a token it got
	// through the TokenRequest API, so its presence proves the
	// controller-manager's whole path (credentials, RBAC, informers).
	if err := waitFor(ctx, kcm, func() error {
		_, err := p.client.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{})
		return err
	}); err != nil {
		return nil, fmt.Errorf("kubeplane: the controller-manager runs but made no default ServiceAccount: %w", err)
	}
	p.ready("default ServiceAccount", began)
	p.started = time.Since(began)
	return p, nil
}

func (p *Plane) ready(what string, began time.Time) {
	p.readyAt = append(p.readyAt, fmt.Sprintf("%s at %s", what, time.Since(began).Round(10*time.Millisecond)))
}

// Close stops every component (SIGTERM to its process group, SIGKILL after
// 10 s) in reverse order of start, and the webhook. It is idempotent.
func (p *Plane) Close() {
	p.closeOnce.Do(func() {
		var wg sync.WaitGroup
		// kwok, the scheduler and the controller-manager do not depend on
		// one another's shutdown: stop them together, then the apiserver,
		// then etcd.
		var first, rest []*proc
		for _, pr := range p.procs {
			switch pr.name {
			case "etcd", "kube-apiserver":
				rest = append(rest, pr)
			default:
				first = append(first, pr)
			}
		}
		for _, pr := range first {
			wg.Add(1)
			go func() { defer wg.Done(); pr.stop() }()
		}
		wg.Wait()
		for i := len(rest) - 1; i >= 0; i-- {
			rest[i].stop()
		}
		if p.hook != nil {
			p.hook.close()
		}
		if p.ownDir {
			_ = os.RemoveAll(p.dir)
		}
	})
}

// Config is a client configuration with the plane's admin identity
// (system:masters, a static token). Each call returns a new copy.
func (p *Plane) Config() *rest.Config { return rest.CopyConfig(p.cfg) }

// Client is a clientset with the admin identity.
func (p *Plane) Client() kubernetes.Interface { return p.client }

// URL is the apiserver's address, https://127.0.0.1:PORT.
func (p *Plane) URL() string { return p.url }

// CA is the PEM certificate that signed the apiserver's serving certificate.
func (p *Plane) CA() []byte { return bytes.Clone(p.pki.caPEM) }

// Dir is the plane's working directory (keys, kubeconfigs, logs, etcd data).
func (p *Plane) Dir() string { return p.dir }

// StartTime is how long the plane took to start and become ready.
func (p *Plane) StartTime() time.Duration { return p.started }

// StartSteps says when each component became ready, from the start.
func (p *Plane) StartSteps() string { return strings.Join(p.readyAt, ", ") }

// SetTokenReviewer makes h answer the apiserver's TokenReviews from now on
// (nil: refuse every webhook token). The admin's static token is not
// reviewed by it.
func (p *Plane) SetTokenReviewer(h http.Handler) {
	if h == nil {
		p.hook.reviewer.Store(nil)
		return
	}
	p.hook.reviewer.Store(&h)
}

// TokenReviews counts the TokenReviews the apiserver sent so far: a test
// can tell a request that was reviewed from one answered from the cache.
func (p *Plane) TokenReviews() int64 { return p.hook.reviews.Load() }

// Memory is the resident memory of each running component, in bytes.
func (p *Plane) Memory() map[string]int64 {
	out := map[string]int64{}
	for _, pr := range p.procs {
		if rss, err := pr.rss(); err == nil {
			out[pr.name] = rss
		}
	}
	return out
}

// Logs returns the last n lines of each component's log.
func (p *Plane) Logs(n int) string {
	var b strings.Builder
	for _, pr := range p.procs {
		fmt.Fprintf(&b, "---- %s (%s), last %d lines:\n%s\n", pr.name, pr.logPath, n, tail(pr.logPath, n))
	}
	return b.String()
}

// Unique is a name prefix no other test of this plane gets, from the test's
// name: for Nodes and labels, which namespaces do not separate.
func (p *Plane) Unique(t testing.TB) string {
	return dnsLabel(t.Name(), 40) + "-" + strconv.FormatInt(p.seq.Add(1), 10)
}

// Namespace creates a namespace for the test alone and deletes it when the
// test ends (the namespace controller then removes what is in it).
func (p *Plane) Namespace(t testing.TB) string {
	t.Helper()
	name := p.Unique(t)
	_, err := p.client.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{testLabel: "true"}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("kubeplane: create namespace %s: %v", name, err)
	}
	t.Cleanup(func() {
		// t.Context() is done by now.
		err := p.client.CoreV1().Namespaces().Delete(context.Background(), name, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("kubeplane: delete namespace %s: %v", name, err)
		}
	})
	// Pods are refused until the serviceaccount controller made the
	// namespace's default ServiceAccount, and a controller refused backs
	// off for seconds: wait the few milliseconds it takes.
	if err := poll(t.Context(), func() (bool, error) {
		_, err := p.client.CoreV1().ServiceAccounts(name).Get(t.Context(), "default", metav1.GetOptions{})
		return err == nil, err
	}); err != nil {
		t.Fatalf("kubeplane: no default ServiceAccount in %s: %v", name, err)
	}
	return name
}

// testLabel marks the namespaces tests made, for Reset.
const testLabel = "kubeplane.fleet-agent.dev/test"

// Reset deletes every namespace made with Namespace and every Node, and
// waits until they are gone, and forgets the token reviewer: the cluster
// tests start from. Namespaces go first, so kwok still runs the Nodes that
// confirm their Pods' deletion.
func (p *Plane) Reset(ctx context.Context) error {
	p.SetTokenReviewer(nil)
	nss, err := p.client.CoreV1().Namespaces().List(ctx, metav1.ListOptions{LabelSelector: testLabel})
	if err != nil {
		return err
	}
	for _, ns := range nss.Items {
		if err := p.client.CoreV1().Namespaces().Delete(ctx, ns.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
	}
	if err := poll(ctx, func() (bool, error) {
		l, err := p.client.CoreV1().Namespaces().List(ctx, metav1.ListOptions{LabelSelector: testLabel})
		return err == nil && len(l.Items) == 0, err
	}); err != nil {
		return fmt.Errorf("kubeplane: reset: namespaces still there: %w", err)
	}
	nodes, err := p.client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	for _, n := range nodes.Items {
		if err := p.RemoveNode(ctx, n.Name); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
	}
	return nil
}

// proc is one component's process.
type proc struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	logFile *os.File
	done    chan struct{}
	waitErr error
}

// run starts a cached binary in its own process group, with its output in
// dir/logs/NAME.log, HOME set to the plane's directory (kwok reads
// ~/.kwok/kwok.yaml otherwise) and a death signal, so a test binary that
// dies without cleaning up (a panic, a -timeout) takes its plane with it.
func (p *Plane) run(name string, args ...string) (*proc, error) {
	logPath := filepath.Join(p.dir, "logs", name+".log")
	if err := os.MkdirAll(filepath.Dir(logPath), 0o700); err != nil {
		return nil, err
	}
	f, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(p.cache.Bin(name), args...)
	cmd.Dir = p.dir
	cmd.Env = []string{"HOME=" + p.dir, "PATH=" + os.Getenv("PATH"), "TMPDIR=" + p.dir}
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("kubeplane: start %s: %w", name, err)
	}
	pr := &proc{name: name, cmd: cmd, logPath: logPath, logFile: f, done: make(chan struct{})}
	go func() {
		pr.waitErr = cmd.Wait()
		f.Close()
		close(pr.done)
	}()
	p.procs = append(p.procs, pr)
	return pr, nil
}

func (pr *proc) exited() bool {
	select {
	case <-pr.done:
		return true
	default:
		return false
	}
}

func (pr *proc) stop() {
	if pr.exited() {
		return
	}
	pgid := -pr.cmd.Process.Pid
	_ = syscall.Kill(pgid, syscall.SIGTERM)
	select {
	case <-pr.done:
	case <-time.After(10 * time.Second):
		_ = syscall.Kill(pgid, syscall.SIGKILL)
		<-pr.done
	}
	// Whatever the component left in its group (it starts none today).
	_ = syscall.Kill(pgid, syscall.SIGKILL)
}

func (pr *proc) rss() (int64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pr.cmd.Process.Pid) + "/status")
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb * 1024, err
		}
	}
	return 0, errors.New("no VmRSS")
}

// waitFor polls check until it succeeds, the process exits, or ctx ends.
func waitFor(ctx context.Context, pr *proc, check func() error) error {
	var last error
	for {
		if last = check(); last == nil {
			return nil
		}
		if pr.exited() {
			return fmt.Errorf("kubeplane: %s exited (%v) before it was ready", pr.name, pr.waitErr)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("kubeplane: %s not ready: %v (%w)", pr.name, last, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func poll(ctx context.Context, cond func() (bool, error)) error {
	var last error
	for {
		ok, err := cond()
		if ok {
			return nil
		}
		if err != nil {
			last = err
		}
		select {
		case <-ctx.Done():
			if last != nil {
				return fmt.Errorf("%w (last error: %v)", ctx.Err(), last)
			}
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func probe(c *http.Client, url, bearer, want string) error {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), want) {
		return fmt.Errorf("GET %s: %d %q", url, resp.StatusCode, bytes.TrimSpace(body))
	}
	return nil
}

// FreePorts asks the kernel for n distinct free loopback ports. They are
// free when asked, not reserved: another process may take one before the
// component binds it, which then fails to start with "address already in
// use" in its log.
func FreePorts(n int) ([]int, error) {
	var lns []net.Listener
	defer func() {
		for _, l := range lns {
			l.Close()
		}
	}()
	ports := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		lns = append(lns, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// kubeconfig is a client configuration for server, trusting caFile, with a
// bearer token (none for the webhook, which the apiserver calls without
// credentials).
func kubeconfig(server, caFile, token string) []byte {
	user := "{}"
	if token != "" {
		user = "\n    token: " + token
	}
	return []byte(fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: kubeplane
  cluster:
    server: %s
    certificate-authority: %s
users:
- name: kubeplane
  user: %s
contexts:
- name: kubeplane
  context:
    cluster: kubeplane
    user: kubeplane
current-context: kubeplane
`, server, caFile, user))
}

// kwokStages writes kwok's configuration: the Stages kwok's own "fast"
// set uses (shipped in its module, copied into the cache by the script):
// Nodes become Ready at once and keep renewing their leases; Pods bound to
// a managed Node run at once, complete if they are a Job's, and are deleted
// once asked to be.
func kwokStages(c Cache, dir string) (string, error) {
	var b bytes.Buffer
	for _, f := range []string{
		"node/fast/node-initialize.yaml",
		"node/heartbeat-with-lease/node-heartbeat-with-lease.yaml",
		"pod/fast/pod-ready.yaml",
		"pod/fast/pod-complete.yaml",
		"pod/fast/pod-delete.yaml",
	} {
		data, err := os.ReadFile(filepath.Join(c.Dir, "kwok-stage", f))
		if err != nil {
			return "", fmt.Errorf("kubeplane: kwok stage missing from the cache (rebuild it with `make kube`): %w", err)
		}
		b.WriteString("---\n")
		b.Write(data)
		if !bytes.HasSuffix(data, []byte("\n")) {
			b.WriteByte('\n')
		}
	}
	path := filepath.Join(dir, "kwok.yaml")
	return path, writeFile(path, b.Bytes(), 0o644)
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

// dnsLabel makes s a lowercase DNS label of at most max characters.
func dnsLabel(s string, max int) string {
	var b strings.Builder
	dash := false
	for _, r := range strings.ToLower(s) {
		ok := (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9')
		if ok {
			b.WriteRune(r)
			dash = false
		} else if !dash && b.Len() > 0 {
			b.WriteByte('-')
			dash = true
		}
		if b.Len() >= max {
			break
		}
	}
	out := strings.Trim(b.String(), "-")
	if out == "" {
		out = "t"
	}
	return out
}
