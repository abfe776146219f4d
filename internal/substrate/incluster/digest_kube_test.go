package incluster

import (
	"bytes"
	"context"
	"io"
	"log"
	"net"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/rs/zerolog"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fleet-agent/fleet-agent/internal/config"
	"github.com/fleet-agent/fleet-agent/internal/imagepin"
	"github.com/fleet-agent/fleet-agent/internal/imageref"
	"github.com/fleet-agent/fleet-agent/internal/state"
	"github.com/fleet-agent/fleet-agent/internal/substrate"
	"github.com/fleet-agent/fleet-agent/internal/substrate/join"
)

// TestDaemonSetPinnedByDigestOnARealControlPlane: the node daemon's tag,
// pushed to a real registry on loopback, is applied to a real API server
// as name:tag@sha256:<the pushed index's digest>. A restart while the
// registry is down keeps that digest (the DaemonSet does not change); a
// tag at a registry nothing answers at is applied as the tag, with the
// reason recorded for status.
func TestDaemonSetPinnedByDigestOnARealControlPlane(t *testing.T) {
	p := kube(t)
	ctx := t.Context()
	kc := p.Client()
	c := newCluster(t, p)
	pool := "pool_" + strings.ReplaceAll(p.Unique(t), "-", "")
	if len(pool) > 60 {
		pool = pool[:60]
	}

	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	ref := strings.TrimPrefix(srv.URL, "http://") + "/team/fleet-agent:v1.2.3"
	idx, err := random.Index(512, 1, 2)
	if err != nil {
		t.Fatal(err)
	}
	tag, err := name.NewTag(ref)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.WriteIndex(tag, idx, remote.WithContext(ctx)); err != nil {
		t.Fatal(err)
	}
	digest, _ := idx.Digest()
	want := ref + "@" + digest.String()

	st, err := state.Open(filepath.Join(t.TempDir(), "state.db"), state.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	joins := join.NewStore(st, join.StoreOptions{})
	var logs bytes.Buffer
	// start is the agent's start: a new pinner (nothing in memory) over
	// the same store, and the in-cluster half asking it at each apply.
	start := func(image string) (*InCluster, *imagepin.Pinner) {
		pin := &imagepin.Pinner{Ref: image, Resolve: imageref.Resolver{Timeout: 5 * time.Second}.Resolve,
			Records: imagepin.StoreRecords{Store: st}, Log: zerolog.New(&logs)}
		nd := &config.NodeDaemon{Image: image, JoinURL: "https://ops.example.com:9465/", ResolveDigest: true}
		return New(Options{Daemon: nd, Joins: joins, Tenant: "acme", Log: zerolog.New(&logs),
			Image: func(ctx context.Context) string { return pin.Image(ctx).Image }}), pin
	}
	applied := func() (string, int64) {
		t.Helper()
		ds, err := kc.AppsV1().DaemonSets(Namespace).Get(ctx, DaemonSetName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return ds.Spec.Template.Spec.Containers[0].Image, ds.Generation
	}
	ic, _ := start(ref)
	t.Cleanup(func() { tearDownAndWait(t, ic, c.target(pool, "adopt")) })

	if _, err := ic.Apply(ctx, c.target(pool, "adopt")); err != nil {
		t.Fatal(err)
	}
	got, gen := applied()
	if got != want {
		t.Fatalf("the DaemonSet names %s, want the digest form %s", got, want)
	}

	// A restart with the registry gone: the recorded digest stays.
	srv.Close()
	ic, pin := start(ref)
	if _, err := ic.Apply(ctx, c.target(pool, "adopt")); err != nil {
		t.Fatal(err)
	}
	if got, g := applied(); got != want || g != gen {
		t.Fatalf("after a restart with the registry down the DaemonSet names %s (generation %d, was %d), want %s unchanged", got, g, gen, want)
	}
	if cur := pin.Current(); cur == nil || cur.Source != "record" || cur.Reason != imagepin.ReasonUnreachable {
		t.Fatalf("the pin says %+v, want the record kept with the reason", cur)
	}

	// A tag at an address nothing answers at: applied as the tag.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String() + "/team/fleet-agent:v9"
	ln.Close()
	ic, _ = start(dead)
	if _, err := ic.Apply(ctx, c.target(pool, "adopt")); err != nil {
		t.Fatal(err)
	}
	if got, _ := applied(); got != dead {
		t.Fatalf("an unreachable registry: the DaemonSet names %s, want the tag %s", got, dead)
	}
	var rec *imagepin.Pin
	if err := st.View(func(tx *state.Tx) (err error) { rec, err = imagepin.Read(tx); return }); err != nil {
		t.Fatal(err)
	}
	if rec == nil || rec.Pinned || rec.Ref != dead || rec.Reason != imagepin.ReasonUnreachable {
		t.Fatalf("recorded %+v, want not pinned, %s", rec, imagepin.ReasonUnreachable)
	}
	if n := strings.Count(logs.String(), "is not pinned"); n != 1 {
		t.Fatalf("the unpinned image was logged %d times, want once:\n%s", n, logs.String())
	}
}

// tearDownAndWait removes what the test put in the shared cluster and
// waits until the Namespace and the claim are gone, so that the next test
// meets an empty cluster.
func tearDownAndWait(t *testing.T, ic *InCluster, target substrate.Target) {
	t.Helper()
	ctx := context.Background()
	kc := kube(t).Client()
	deadline := time.Now().Add(60 * time.Second)
	// Once it succeeds the access is revoked, so it is not called again.
	for err := ic.Teardown(ctx, target); err != nil; err = ic.Teardown(ctx, target) {
		if time.Now().After(deadline) {
			t.Fatalf("teardown: %v", err)
		}
		time.Sleep(250 * time.Millisecond) // polling the teardown's waits
	}
	for {
		_, nsErr := kc.CoreV1().Namespaces().Get(ctx, Namespace, metav1.GetOptions{})
		_, claimErr := kc.CoreV1().ConfigMaps(ClaimNamespace).Get(ctx, ClaimName, metav1.GetOptions{})
		if apierrors.IsNotFound(nsErr) && apierrors.IsNotFound(claimErr) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the teardown: namespace %v, claim %v", nsErr, claimErr)
		}
		time.Sleep(250 * time.Millisecond) // polling the namespace controller
	}
}
