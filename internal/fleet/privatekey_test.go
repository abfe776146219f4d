package fleet

import (
	"strings"
	"testing"
)

// TestPrivateKeysAreSecrets: a provider config value that holds a private
// key must be a reference whatever its field is called (gcp's credentials
// takes a service account key, which the field names of the secret rule do
// not catch): in a document, and in an edit, which is what a drift proposal
// would write to git (found from outside: an edit put a key into the agent's
// branch).
func TestPrivateKeysAreSecrets(t *testing.T) {
	keyJSON := `{\"type\":\"service_account\",\"private_key\":\"-----BEGIN PRIVATE KEY-----\\nMIIE\\n-----END PRIVATE KEY-----\\n\"}`
	for _, c := range []struct{ name, config, want string }{
		{"a service account key", `{"projectId":"p","credentials":"` + keyJSON + `"}`, "/providerAccounts/0/config/credentials: credentials holds a private key"},
		{"a PEM block deep down", `{"projectId":"p","nested":[{"pem":"-----BEGIN RSA PRIVATE KEY-----\nx\n-----END RSA PRIVATE KEY-----"}]}`, "/providerAccounts/0/config/nested/0/pem: pem holds a private key"},
		{"a reference", `{"projectId":"p","credentials":"secret://gcp-key"}`, ""},
	} {
		doc := `{"version":1,"providerAccounts":[{"name":"g","provider":"gcp","config":` + c.config + `}]}`
		_, errs := Validate("fleet.json", []byte(doc))
		got := ""
		if errs != nil {
			got = errs.Text()
		}
		if c.want == "" && got != "" || c.want != "" && !strings.Contains(got, c.want) {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
		if strings.Contains(got, "MIIE") || strings.Contains(got, "BEGIN") {
			t.Errorf("%s: the refusal repeats the key: %q", c.name, got)
		}
	}
	err := CheckSecrets("providerAccount", "config", map[string]any{"credentials": "{\"private_key\":\"-----BEGIN PRIVATE KEY-----\"}"})
	if err == nil || !strings.Contains(err.Error(), "credentials holds a private key") {
		t.Fatalf("an edit of a key: %v", err)
	}
}
