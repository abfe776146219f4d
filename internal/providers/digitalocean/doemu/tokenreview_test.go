package doemu_test

import (
	"bytes"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/digitalocean/godo"

	"github.com/fleet-agent/fleet-agent/internal/providers/digitalocean/doemu"
)

// review posts a TokenReview as kube-apiserver's webhook token
// authenticator does and returns the status it got back.
func review(t *testing.T, w *world, tok string) (authenticated bool, user struct {
	Username string   `json:"username"`
	Groups   []string `json:"groups"`
}) {
	t.Helper()
	body, _ := json.Marshal(map[string]any{
		"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
		"spec": map[string]any{"token": tok},
	})
	resp, err := http.Post(w.srv.URL+doemu.TokenReviewPath, "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Status     struct {
			Authenticated bool `json:"authenticated"`
			User          struct {
				Username string   `json:"username"`
				Groups   []string `json:"groups"`
			} `json:"user"`
		} `json:"status"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != 200 || out.Kind != "TokenReview" || out.APIVersion != "authentication.k8s.io/v1" {
		t.Fatalf("TokenReview answer %d %+v: %v", resp.StatusCode, out, err)
	}
	return out.Status.Authenticated, out.Status.User
}

func TestCredentialsAndTokenReview(t *testing.T) {
	w := newWorld(t, doemu.Options{}, wireAll)
	ctx := t.Context()
	c := w.running(t, "fa-creds")
	six := 600
	cred, _, err := w.do.Kubernetes.GetCredentials(ctx, c.ID, &godo.KubernetesClusterCredentialsGetRequest{ExpirySeconds: &six})
	if err != nil {
		t.Fatal(err)
	}
	if cred.Server != c.Endpoint || cred.Token == "" || !cred.ExpiresAt.Equal(epoch.Add(600*time.Second)) {
		t.Fatalf("credentials %s, expires %s", cred.Server, cred.ExpiresAt)
	}
	blk, _ := pem.Decode(cred.CertificateAuthorityData)
	if blk == nil {
		t.Fatal("certificate_authority_data is not a PEM")
	}
	if ca, err := x509.ParseCertificate(blk.Bytes); err != nil || !ca.IsCA {
		t.Fatalf("the CA: %v", err)
	}
	if x := w.emu.Exchanges(); x[len(x)-1].RawQuery != "expiry_seconds=600" {
		t.Errorf("query %q", x[len(x)-1].RawQuery)
	}
	week, _, err := w.do.Kubernetes.GetCredentials(ctx, c.ID, nil)
	if err != nil || !week.ExpiresAt.Equal(epoch.Add(7*24*time.Hour)) {
		t.Fatalf("without expiry_seconds: %v %s", err, week.ExpiresAt)
	}

	ok, user := review(t, w, cred.Token)
	if !ok || user.Username != "ops@example.com" || !slices.Contains(user.Groups, "system:masters") {
		t.Fatalf("a minted token: authenticated %v as %+v", ok, user)
	}
	if !w.emu.Accepts(c.Endpoint, cred.Token) || w.emu.Accepts("https://elsewhere.invalid", cred.Token) {
		t.Error("Accepts does not tie the token to its cluster's endpoint")
	}
	if ok, _ := review(t, w, cred.Token+"x"); ok {
		t.Error("a forged token is authenticated")
	}
	if ok, _ := review(t, w, token); ok {
		t.Error("the API token is authenticated by the cluster")
	}
	w.clk.Advance(600 * time.Second)
	if ok, _ := review(t, w, cred.Token); ok {
		t.Error("an expired token is authenticated")
	}
	if ok, _ := review(t, w, week.Token); !ok {
		t.Error("the week-long token expired with the short one")
	}
	if _, err := w.do.Kubernetes.Delete(ctx, c.ID); err != nil {
		t.Fatal(err)
	}
	if ok, _ := review(t, w, week.Token); ok {
		t.Error("a token of a deleted cluster is authenticated")
	}
	if _, _, err := w.do.Kubernetes.GetCredentials(ctx, "00000000-0000-4000-8000-000000000000", nil); status(err) != 404 {
		t.Errorf("credentials of a missing cluster: %v", err)
	}
}

func TestKubeEndpointIsHandedOut(t *testing.T) {
	ca := []byte("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")
	w := newWorld(t, doemu.Options{Kube: &doemu.KubeAPI{URL: "https://127.0.0.1:6443", CAPEM: ca}}, wireAll)
	c := w.running(t, "fa-kube")
	cred, _, err := w.do.Kubernetes.GetCredentials(t.Context(), c.ID, nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.Endpoint != "https://127.0.0.1:6443" || cred.Server != c.Endpoint || !bytes.Equal(cred.CertificateAuthorityData, ca) {
		t.Fatalf("endpoint %s server %s CA %q", c.Endpoint, cred.Server, cred.CertificateAuthorityData)
	}
}
