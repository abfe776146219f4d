package incluster_test

import (
	"strings"
	"testing"

	"github.com/fleet-agent/fleet-agent/internal/providers"
	"github.com/fleet-agent/fleet-agent/internal/refusal"
	"github.com/fleet-agent/fleet-agent/internal/substrate/incluster"
)

// A credential that no client can be made of is not a bug of the agent:
// a cluster whose endpoint is under .invalid (the fake provider without a
// kube block) has no Kubernetes API, which is said with advice; a CA that
// does not parse is the provider's fault, tried again with a new
// credential. Neither is INTERNAL.
func TestNewClientRefusesUnusableCredentials(t *testing.T) {
	notACert := []byte("-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydGlmaWNhdGU=\n-----END CERTIFICATE-----\n")
	for _, c := range []struct {
		endpoint string
		code     refusal.Code
		says     []string
	}{
		{"https://0123abcd.k8s.fake.invalid", refusal.InvalidState, []string{"no Kubernetes API", "kube block", "docs/configuration.md"}},
		{"https://api.example.com", refusal.Unavailable, []string{"certificate", "api.example.com"}},
	} {
		_, err := incluster.NewClient(providers.Credential{Endpoint: c.endpoint, CACert: notACert, Token: "t0ken-never-said"})
		if err == nil {
			t.Fatalf("%s: a client of a credential whose CA is not a certificate", c.endpoint)
		}
		if got := refusal.CodeOf(err); got != c.code {
			t.Errorf("%s: code %s, want %s (%v)", c.endpoint, got, c.code, err)
		}
		for _, s := range c.says {
			if !strings.Contains(err.Error(), s) {
				t.Errorf("%s: %q does not say %q", c.endpoint, err, s)
			}
		}
		if strings.Contains(err.Error(), "t0ken-never-said") {
			t.Errorf("%s: the error holds the token", c.endpoint)
		}
	}
}
