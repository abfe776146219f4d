package gcp_test

import (
	"bytes"
	"os"
	"slices"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/fleet-agent/fleet-agent/internal/providers"
	"github.com/fleet-agent/fleet-agent/internal/providers/gcp/gkeemu"
	"github.com/fleet-agent/fleet-agent/internal/testutil/kubeplane"
)

// The test binary's one control plane, started by the first test that
// needs it (most tests here need no API server), stopped by TestMain.
var shared = kubeplane.Lazy{LogLines: 80}

func TestMain(m *testing.M) { os.Exit(shared.Run(m)) }

func kube(t *testing.T) *kubeplane.Plane { t.Helper(); return shared.Plane(t) }

// clientFor is client-go with nothing but what a credential carries.
func clientFor(t *testing.T, c providers.Credential) kubernetes.Interface {
	t.Helper()
	cs, err := kubernetes.NewForConfig(&rest.Config{Host: c.Endpoint, BearerToken: c.Token, TLSClientConfig: rest.TLSClientConfig{CAData: c.CACert}})
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// whoAmI asks the API server who the credential is (a SelfSubjectReview
// needs no permission, only authentication).
func whoAmI(t *testing.T, c providers.Credential) (string, error) {
	t.Helper()
	r, err := clientFor(t, c).AuthenticationV1().SelfSubjectReviews().Create(t.Context(), &authnv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		return "", err
	}
	return r.Status.UserInfo.Username, nil
}

// TestCredentialsAtARealAPIServer: the emulator fronts a real
// kube-apiserver (its clusters' endpoint and CA are the plane's, the
// plane's webhook token authentication posts to the emulator's TokenReview
// route). A credential the adapter's Credentials mints is accepted for the
// account's identity, as a cluster admin; a forged token is 401; a token
// past its life on the emulator's clock is refused (a fresh one at once,
// one the API server accepted before within its 10 s success cache). Google
// ignores the assertion's exp, we believe, so a token outlives the
// credential's 600 s (the caller drops it at ExpiresAt); with the other
// answer to that guess it ends at 600 s (and the 10 s x/oauth2 back-dates
// the assertion by).
func TestCredentialsAtARealAPIServer(t *testing.T) {
	p := kube(t)
	t.Logf("control plane up in %s (%s)", p.StartTime().Round(time.Millisecond), p.StartSteps())
	for _, c := range []struct {
		name   string
		honour bool
	}{
		{"tokensLiveAnHour", false},
		{"assertionExpiryHonoured", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			v := newEnv(t, envOpts{emu: func(o *gkeemu.Options) {
				o.Kube = gkeemu.KubeAPI{Endpoint: p.URL(), CAPEM: p.CA()}
				o.Guesses.HonourAssertionExpiry = c.honour
			}})
			p.SetTokenReviewer(v.emu.TokenReviewer())
			t.Cleanup(func() { p.SetTokenReviewer(nil) })
			cl := v.ready(t, clusterSpec("kube-"+map[bool]string{false: "hour", true: "exp"}[c.honour]))
			if cl.Outputs.Endpoint != p.URL() {
				t.Fatalf("endpoint %s, want the plane's %s", cl.Outputs.Endpoint, p.URL())
			}
			mint := func() providers.Credential {
				t.Helper()
				cred, err := v.ad.Credentials(t.Context(), v.acct, cl.Ref)
				if err != nil {
					t.Fatal(err)
				}
				if cred.Endpoint != p.URL() || !bytes.Equal(cred.CACert, p.CA()) || !cred.ExpiresAt.Equal(v.clk.Now().Add(providers.CredentialTTL)) {
					t.Fatalf("credential: endpoint %s, CA from the plane %v, expires %s", cred.Endpoint, bytes.Equal(cred.CACert, p.CA()), cred.ExpiresAt)
				}
				return cred
			}

			// Accepted, for the account's identity, as a cluster admin; a new
			// token's first request is reviewed by the emulator, the next
			// ones answered from the API server's success cache. Round trips
			// are medians of five.
			var reviewed, cached []time.Duration
			var first providers.Credential
			var firstReviewed time.Time
			for i := range 5 {
				cred := mint()
				reviews := p.TokenReviews()
				reviewAt := time.Now()
				who, err := whoAmI(t, cred)
				reviewed = append(reviewed, time.Since(reviewAt))
				if err != nil || who != saEmail {
					t.Fatalf("SelfSubjectReview: %q %v", who, err)
				}
				if p.TokenReviews() != reviews+1 {
					t.Fatalf("%d TokenReviews for a new token, want 1", p.TokenReviews()-reviews)
				}
				began := time.Now()
				if who, err := whoAmI(t, cred); err != nil || who != saEmail {
					t.Fatalf("SelfSubjectReview again: %q %v", who, err)
				}
				cached = append(cached, time.Since(began))
				// An admin: GKE maps container.admin to cluster-admin.
				if _, err := clientFor(t, cred).CoreV1().Namespaces().List(t.Context(), metav1.ListOptions{}); err != nil {
					t.Fatalf("list namespaces: %v", err)
				}
				if p.TokenReviews() != reviews+1 {
					t.Fatal("a token reviewed a moment ago was reviewed again: the success cache is not in play")
				}
				if i == 0 {
					first, firstReviewed = cred, reviewAt
				}
			}
			slices.Sort(reviewed)
			slices.Sort(cached)
			t.Logf("round trip: %s reviewed (client-go -> kube-apiserver -> webhook -> gkeemu), %s from the success cache (medians of 5)",
				reviewed[2].Round(time.Microsecond), cached[2].Round(time.Microsecond))
			if !slices.ContainsFunc(v.emu.Exchanges(), func(x gkeemu.Exchange) bool { return x.MethodID == "tokenreviews.create" && x.Status == 200 }) {
				t.Fatal("the emulator saw no TokenReview")
			}

			// Forged: a token of the emulator's shape that it never minted.
			forged := first
			forged.Token = "ya29.emu-" + "forgedforgedforgedforgedforgedforgedforgedforgedforgedforged"
			if _, err := whoAmI(t, forged); !apierrors.IsUnauthorized(err) {
				t.Fatalf("a forged token: %v, want 401", err)
			}

			// Expiry, on the emulator's clock. Tokens minted now and not shown
			// to the API server yet, so nothing of them is cached.
			atTTL, atHour := mint(), mint()
			v.clk.Advance(providers.CredentialTTL + 15*time.Second)
			who, err := whoAmI(t, atTTL)
			switch {
			case c.honour && !apierrors.IsUnauthorized(err):
				t.Fatalf("past 600 s with the assertion's exp honoured: %q %v, want 401", who, err)
			case !c.honour && (err != nil || who != saEmail):
				t.Fatalf("past 600 s a Google token still lives: %q %v", who, err)
			}
			v.clk.Advance(time.Hour)
			if _, err := whoAmI(t, atHour); !apierrors.IsUnauthorized(err) {
				t.Fatalf("past an hour: %v, want 401", err)
			}
			if c.honour {
				return // the success cache is the API server's: once is enough
			}
			// A token the API server accepted is refused once its success
			// cache lets go, within kubeplane.SuccessCacheTTL.
			var refusedAfter time.Duration
			for {
				_, err := whoAmI(t, first)
				if apierrors.IsUnauthorized(err) {
					refusedAfter = time.Since(firstReviewed)
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				if time.Since(firstReviewed) > kubeplane.SuccessCacheTTL+5*time.Second {
					t.Fatalf("an expired token still accepted %s after it was reviewed", time.Since(firstReviewed))
				}
				time.Sleep(250 * time.Millisecond)
			}
			t.Logf("an expired token that was in the success cache refused %s after it was reviewed", refusedAfter.Round(time.Millisecond))
		})
	}
}
