package aws_test

import (
	"encoding/base64"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/fleet-agent/fleet-agent/internal/providers"
	"github.com/fleet-agent/fleet-agent/internal/providers/aws/eksemu"
	"github.com/fleet-agent/fleet-agent/internal/testutil/kubeplane"
)

// TestMintedTokensAtARealAPIServer: the emulator fronts a real
// kube-apiserver (kubeplane): DescribeCluster hands out the plane's URL and
// CA, and the plane's webhook token authenticator asks the emulator's
// TokenReview route of the cluster. A credential Credentials mints is taken
// by the apiserver, over TLS verified with the CA the adapter read, as the
// account's IAM principal in system:masters; a forged token, another
// cluster's token and a principal without an access entry get 401; once
// the emulator's clock passes the token's 600 s it is refused within the
// apiserver's 10 s success cache, and a token minted then works.
func TestMintedTokensAtARealAPIServer(t *testing.T) {
	t.Parallel()
	plane := kubeplane.Start(t, kubeplane.Options{})
	h := newHarness(t, harnessOpts{emu: eksemu.Options{Steps: &eksemu.Steps{}, KubeEndpoint: plane.URL(), KubeCA: plane.CA()}})
	ctx := t.Context()
	c := h.running("c1")
	other := h.running("c2")
	plane.SetTokenReviewer(h.emu.TokenReviewer("c1"))

	cred, err := h.adapter.Credentials(ctx, h.acct, c.Ref)
	if err != nil {
		t.Fatal(err)
	}
	if cred.Endpoint != plane.URL() || string(cred.CACert) != string(plane.CA()) {
		t.Fatalf("the credential points at %s, not the plane at %s (or another CA)", cred.Endpoint, plane.URL())
	}
	client := func(token string) kubernetes.Interface {
		t.Helper()
		cs, err := kubernetes.NewForConfig(&rest.Config{Host: cred.Endpoint, BearerToken: token,
			TLSClientConfig: rest.TLSClientConfig{CAData: cred.CACert}, UserAgent: "aws-adapter-test"})
		if err != nil {
			t.Fatal(err)
		}
		return cs
	}
	whoami := func(token string) (*authnv1.SelfSubjectReview, error) {
		return client(token).AuthenticationV1().SelfSubjectReviews().Create(ctx, &authnv1.SelfSubjectReview{}, metav1.CreateOptions{})
	}
	// refused fails unless the apiserver answers 401 because the
	// emulator refused the token, for the reason given.
	refused := func(what, token, why string) {
		t.Helper()
		before := h.emu.Count("TokenReview")
		_, err := whoami(token)
		if !apierrors.IsUnauthorized(err) {
			t.Errorf("%s: %v, want 401", what, err)
		}
		reqs := h.emu.Requests()
		// One review: the apiserver does not retry a 403.
		if h.emu.Count("TokenReview") != before+1 || !strings.Contains(reqs[len(reqs)-1].Refusal, why) {
			t.Errorf("%s: not refused by the emulator for %q (last request %+v)", what, why, reqs[len(reqs)-1])
		}
	}

	reviews := h.emu.Count("TokenReview")
	admin := client(cred.Token)
	began := time.Now()
	me, err := admin.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authnv1.SelfSubjectReview{}, metav1.CreateOptions{})
	reviewed := time.Since(began)
	if err != nil {
		t.Fatalf("the minted token at the apiserver: %v", err)
	}
	if u := me.Status.UserInfo; u.Username != userArn || !slices.Contains(u.Groups, "system:masters") || !slices.Contains(u.Groups, "system:authenticated") {
		t.Errorf("the apiserver sees %+v", u)
	}
	if h.emu.Count("TokenReview") != reviews+1 {
		t.Errorf("%d TokenReviews at the emulator for one request", h.emu.Count("TokenReview")-reviews)
	}
	began = time.Now()
	if _, err := admin.CoreV1().Namespaces().List(ctx, metav1.ListOptions{}); err != nil {
		t.Errorf("list namespaces as the cluster's admin: %v", err)
	}
	cached := time.Since(began)
	if h.emu.Count("TokenReview") != reviews+1 {
		t.Errorf("a second request within %s was reviewed again", kubeplane.SuccessCacheTTL)
	}
	t.Logf("apiserver round trip: %s with a TokenReview at the emulator, %s from its success cache", reviewed.Round(time.Microsecond), cached.Round(time.Microsecond))

	refused("a forged signature", forge(t, cred.Token), "signature does not match")
	refused("not an EKS token", "k8s-aws-v1.bm90IGEgdG9rZW4", "not a presigned")
	theirs, err := h.adapter.Credentials(ctx, h.acct, other.Ref)
	if err != nil {
		t.Fatal(err)
	}
	refused("a token for cluster c2", theirs.Token, "signature does not match")
	// The team's role has keys the emulator knows but no access entry on c1.
	team, err := h.adapter.Credentials(ctx, h.team, c.Ref)
	if err != nil {
		t.Fatal(err)
	}
	refused("a principal without an access entry", team.Token, "no access entry")

	// Expiry on the emulator's clock. The token was last accepted at most
	// now; the apiserver may answer from its cache for SuccessCacheTTL.
	lastOK := time.Now()
	if _, err := whoami(cred.Token); err != nil {
		t.Fatalf("before it expires: %v", err)
	}
	h.clk.Advance(providers.CredentialTTL + time.Second)
	var refusedAt time.Duration
	for {
		_, err := whoami(cred.Token)
		if apierrors.IsUnauthorized(err) {
			refusedAt = time.Since(lastOK)
			break
		}
		if err != nil {
			t.Fatalf("an expired token: %v", err)
		}
		if time.Since(lastOK) > kubeplane.SuccessCacheTTL+5*time.Second {
			t.Fatalf("an expired token is still taken %s after it was last reviewed", time.Since(lastOK).Round(time.Millisecond))
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("the expired token was refused %s after its last success (the apiserver caches a success %s)", refusedAt.Round(time.Millisecond), kubeplane.SuccessCacheTTL)
	fresh, err := h.adapter.Credentials(ctx, h.acct, c.Ref)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := whoami(fresh.Token); err != nil {
		t.Errorf("a token minted after the clock moved: %v", err)
	}
}

// forge changes one hex digit of a token's signature.
func forge(t *testing.T, token string) string {
	t.Helper()
	raw, err := base64.RawURLEncoding.DecodeString(strings.TrimPrefix(token, "k8s-aws-v1."))
	if err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(string(raw))
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	sig := []byte(q.Get("X-Amz-Signature"))
	if len(sig) == 0 {
		t.Fatalf("no signature in %s", u.Redacted())
	}
	if sig[0] == '0' {
		sig[0] = '1'
	} else {
		sig[0] = '0'
	}
	q.Set("X-Amz-Signature", string(sig))
	u.RawQuery = q.Encode()
	return "k8s-aws-v1." + base64.RawURLEncoding.EncodeToString([]byte(u.String()))
}
