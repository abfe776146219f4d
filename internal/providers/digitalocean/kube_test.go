package digitalocean_test

import (
	"context"
	"net/http/httputil"
	"net/url"
	"os"
	"slices"
	"sort"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/fleet-agent/fleet-agent/internal/providers"
	"github.com/fleet-agent/fleet-agent/internal/providers/digitalocean/doemu"
	"github.com/fleet-agent/fleet-agent/internal/testutil/kubeplane"
)

// The test binary's one control plane, started by the first test that
// needs it (most tests here need no API server), stopped by TestMain.
var shared = kubeplane.Lazy{LogLines: 80}

func TestMain(m *testing.M) { os.Exit(shared.Run(m)) }

func sharedPlane(t testing.TB) *kubeplane.Plane { t.Helper(); return shared.Plane(t) }

const tokenReviewRoute = "POST " + doemu.TokenReviewPath

// kubeWorld is the emulator fronting the shared plane: every cluster's
// endpoint and CA are the plane's, and the plane's webhook token
// authentication asks the emulator's TokenReview route, over its HTTP
// server, about every bearer token it does not have cached.
func kubeWorld(t testing.TB) (*world, *kubeplane.Plane) {
	t.Helper()
	p := sharedPlane(t)
	// No rate limit: a benchmark mints credentials faster than 250 a minute
	// of the emulator's clock, which does not move.
	w := newWorld(t, doemu.Options{Kube: &doemu.KubeAPI{URL: p.URL(), CAPEM: p.CA()}, RatePerMinute: -1, RatePerHour: -1}, "")
	target, err := url.Parse(w.srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	p.SetTokenReviewer(&httputil.ReverseProxy{Rewrite: func(r *httputil.ProxyRequest) {
		r.SetURL(target)
		r.Out.URL.Path, r.Out.URL.RawPath = doemu.TokenReviewPath, ""
	}})
	t.Cleanup(func() { p.SetTokenReviewer(nil) })
	return w, p
}

// clientFor is client-go with a credential exactly as the adapter minted it.
func clientFor(t testing.TB, c providers.Credential) kubernetes.Interface {
	t.Helper()
	cfg := &rest.Config{Host: c.Endpoint, BearerToken: c.Token, TLSClientConfig: rest.TLSClientConfig{CAData: c.CACert},
		QPS: 1000, Burst: 1000, Timeout: 30 * time.Second}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

func whoAmI(ctx context.Context, c kubernetes.Interface) (authnv1.UserInfo, error) {
	r, err := c.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authnv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		return authnv1.UserInfo{}, err
	}
	return r.Status.UserInfo, nil
}

// TestMintedCredentialsOnARealAPIServer: a credential the adapter mints
// (GET .../credentials?expiry_seconds=600) reaches a real kube-apiserver at
// the endpoint and CA DigitalOcean hands out, and is checked there for real:
// the apiserver asks the emulator's TokenReview route, which knows it as the
// API token's user in system:masters, so client-go lists namespaces with it.
// A forged token, the DigitalOcean API token itself and a credential of a
// deleted cluster get 401. Past its 600 s on the emulator's clock a
// credential is refused: at once when the apiserver has not seen it, and
// within its 10 s success cache when it has.
func TestMintedCredentialsOnARealAPIServer(t *testing.T) {
	w, p := kubeWorld(t)
	t.Logf("the control plane started in %s", p.StartTime().Round(time.Millisecond))
	ctx := t.Context()
	c := w.ready(t, "fa-kube")
	cred, err := w.ad.Credentials(ctx, acct, c.Ref)
	if err != nil {
		t.Fatal(err)
	}
	if cred.Endpoint != p.URL() || c.Outputs.Endpoint != p.URL() || !cred.ExpiresAt.Equal(w.clk.Now().Add(providers.CredentialTTL)) {
		t.Fatalf("credential for %s expiring %s; cluster endpoint %s", cred.Endpoint, cred.ExpiresAt, c.Outputs.Endpoint)
	}
	minted := clientFor(t, cred)

	reviews, asked := p.TokenReviews(), w.emu.Count(tokenReviewRoute)
	began := time.Now()
	user, err := whoAmI(ctx, minted)
	reviewed := time.Since(began)
	if err != nil || user.Username != "ops@example.com" || !slices.Contains(user.Groups, "system:masters") {
		t.Fatalf("the minted credential: %+v, %v", user, err)
	}
	if p.TokenReviews()-reviews != 1 || w.emu.Count(tokenReviewRoute)-asked != 1 {
		t.Fatalf("the first request: %d TokenReviews at the plane, %d at the emulator; want 1 and 1", p.TokenReviews()-reviews, w.emu.Count(tokenReviewRoute)-asked)
	}
	began = time.Now()
	nss, err := minted.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
	cached := time.Since(began)
	lastAccepted := time.Now()
	if err != nil || !slices.ContainsFunc(nss.Items, func(n corev1.Namespace) bool { return n.Name == "kube-system" }) {
		t.Fatalf("listing namespaces with the minted credential: %v", err)
	}
	t.Logf("apiserver round trip: %s with a TokenReview to the emulator, %s from the apiserver's cache", reviewed.Round(time.Microsecond), cached.Round(time.Microsecond))

	forged := cred
	forged.Token = cred.Token[:len(cred.Token)-4] + "beef"
	apiTok := cred
	apiTok.Token = apiToken
	for what, c := range map[string]providers.Credential{"a forged token": forged, "the DigitalOcean API token": apiTok} {
		if _, err := whoAmI(ctx, clientFor(t, c)); !apierrors.IsUnauthorized(err) {
			t.Errorf("%s: %v, want 401 Unauthorized", what, err)
		}
	}

	// Expiry, on the emulator's clock.
	unused, err := w.ad.Credentials(ctx, acct, c.Ref)
	if err != nil {
		t.Fatal(err)
	}
	w.clk.Advance(providers.CredentialTTL + time.Second)
	if _, err := whoAmI(ctx, clientFor(t, unused)); !apierrors.IsUnauthorized(err) {
		t.Errorf("an expired credential the apiserver never saw: %v, want 401", err)
	}
	deadline := time.Now().Add(kubeplane.SuccessCacheTTL + 5*time.Second)
	for {
		_, err := minted.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
		if apierrors.IsUnauthorized(err) {
			break
		}
		if err != nil {
			t.Fatalf("the expired credential: %v, want 401 or (cached) success", err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("an expired credential still accepted %s after it was last reviewed", time.Since(lastAccepted).Round(time.Millisecond))
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("the expired credential was refused %s after its last accepted request (kube-apiserver caches a success for %s)",
		time.Since(lastAccepted).Round(time.Millisecond), kubeplane.SuccessCacheTTL)

	// A fresh credential of a cluster being deleted is refused.
	fresh, err := w.ad.Credentials(ctx, acct, c.Ref)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.ad.DeleteCluster(ctx, acct, c.Ref); err != nil {
		t.Fatal(err)
	}
	if _, err := whoAmI(ctx, clientFor(t, fresh)); !apierrors.IsUnauthorized(err) {
		t.Errorf("a credential of a deleted cluster: %v, want 401", err)
	}
}

// BenchmarkAPIServerRoundTrip: a request with a credential the apiserver
// has not seen (reviewed: the apiserver asks the emulator through the
// webhook) against the floor of the same request answered from the
// apiserver's success cache, in the same run.
func BenchmarkAPIServerRoundTrip(b *testing.B) {
	w, _ := kubeWorld(b)
	ctx := b.Context()
	c := w.ready(b, "fa-bench")
	var reviewed, cached []time.Duration
	for b.Loop() {
		b.StopTimer()
		cred, err := w.ad.Credentials(ctx, acct, c.Ref)
		if err != nil {
			b.Fatal(err)
		}
		cs := clientFor(b, cred)
		b.StartTimer()
		for i, into := range []*[]time.Duration{&reviewed, &cached} {
			began := time.Now()
			if _, err := whoAmI(ctx, cs); err != nil {
				b.Fatalf("request %d: %v", i, err)
			}
			*into = append(*into, time.Since(began))
		}
	}
	r, f := median(reviewed), median(cached)
	b.ReportMetric(float64(r.Microseconds()), "reviewed-µs")
	b.ReportMetric(float64(f.Microseconds()), "cached-µs")
	b.ReportMetric(float64(r)/float64(f), "x-floor")
}

func median(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}
