package gkeemu_test

import (
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"
)

// signAssertion signs a service-account assertion the way other clients
// do: google-auth (Python) always puts Google's token endpoint in aud,
// whatever the key's token_uri; the Node JWT client leaves kid out.
func signAssertion(t *testing.T, key []byte, aud string, withKid bool) string {
	t.Helper()
	now := time.Now().Unix()
	return signClaims(t, key, withKid, map[string]any{"scope": "https://www.googleapis.com/auth/cloud-platform", "aud": aud, "iat": now, "exp": now + 3600})
}

// signClaims signs an assertion of a key with the given claims (iss is the
// key's account).
func signClaims(t *testing.T, key []byte, withKid bool, claims map[string]any) string {
	t.Helper()
	var k struct {
		PrivateKey   string `json:"private_key"`
		PrivateKeyID string `json:"private_key_id"`
		ClientEmail  string `json:"client_email"`
	}
	if err := json.Unmarshal(key, &k); err != nil {
		t.Fatal(err)
	}
	blk, _ := pem.Decode([]byte(k.PrivateKey))
	pk, err := x509.ParsePKCS8PrivateKey(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	hdr := map[string]string{"alg": "RS256", "typ": "JWT"}
	if withKid {
		hdr["kid"] = k.PrivateKeyID
	}
	claims["iss"] = k.ClientEmail
	hb, _ := json.Marshal(hdr)
	cb, _ := json.Marshal(claims)
	in := base64.RawURLEncoding.EncodeToString(hb) + "." + base64.RawURLEncoding.EncodeToString(cb)
	d := sha256.Sum256([]byte(in))
	sig, err := rsa.SignPKCS1v15(rand.Reader, pk.(*rsa.PrivateKey), crypto.SHA256, d[:])
	if err != nil {
		t.Fatal(err)
	}
	return in + "." + base64.RawURLEncoding.EncodeToString(sig)
}

func postToken(t *testing.T, uri, assertion string) (int, string) {
	t.Helper()
	resp, err := http.PostForm(uri, url.Values{"grant_type": {"urn:ietf:params:oauth:grant-type:jwt-bearer"}, "assertion": {assertion}})
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestAssertionShapes: the token endpoint takes assertions as Google's
// other clients sign them, and still refuses a wrong audience.
func TestAssertionShapes(t *testing.T) {
	v := start(t, nil)
	cases := []struct {
		name    string
		aud     string
		kid     bool
		want    int
		wantSub string
	}{
		{"google-auth: Google's aud, kid", "https://oauth2.googleapis.com/token", true, 200, "access_token"},
		{"node: Google's aud, no kid", "https://oauth2.googleapis.com/token", false, 200, "access_token"},
		{"x/oauth2: token_uri as aud", v.emu.TokenURI(), true, 200, "access_token"},
		{"another audience", "https://example.com/token", true, 400, "invalid_grant"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, body := postToken(t, v.emu.TokenURI(), signAssertion(t, v.key, c.aud, c.kid))
			if code != c.want || !strings.Contains(body, c.wantSub) {
				t.Errorf("got %d %s", code, body)
			}
		})
	}
}

// TestAltDefaultsToJSON: the discovery document makes alt=json the
// default; googleapis for Node sends no alt at all.
func TestAltDefaultsToJSON(t *testing.T) {
	v := start(t, nil)
	code, body := postToken(t, v.emu.TokenURI(), signAssertion(t, v.key, "https://oauth2.googleapis.com/token", false))
	if code != 200 {
		t.Fatal(code, body)
	}
	var tok struct {
		AccessToken string `json:"access_token"`
	}
	_ = json.Unmarshal([]byte(body), &tok)
	for _, q := range []string{"", "?alt=json", "?prettyPrint=false", "?alt=media"} {
		req, _ := http.NewRequest("GET", v.emu.URL()+"/v1/"+parent("-")+"/clusters"+q, nil)
		req.Header.Set("Authorization", "Bearer "+tok.AccessToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		want := 200
		if q == "?alt=media" {
			want = 400
		}
		if resp.StatusCode != want {
			t.Errorf("%q: %d, want %d", q, resp.StatusCode, want)
		}
	}
}

// TestIDTokenAssertion: an assertion with target_audience and no scope
// (google-auth asks for one when gcloud activates a key) gets an ID token
// for that audience, as Google's endpoint answers it.
func TestIDTokenAssertion(t *testing.T) {
	v := start(t, nil)
	now := time.Now().Unix()
	code, body := postToken(t, v.emu.TokenURI(), signClaims(t, v.key, true, map[string]any{
		"aud": "https://oauth2.googleapis.com/token", "target_audience": "32555940559.apps.googleusercontent.com", "iat": now, "exp": now + 3600}))
	var out struct {
		IDToken string `json:"id_token"`
	}
	if code != 200 || json.Unmarshal([]byte(body), &out) != nil || strings.Count(out.IDToken, ".") != 2 {
		t.Fatalf("got %d %s", code, body)
	}
	cb, err := base64.RawURLEncoding.DecodeString(strings.Split(out.IDToken, ".")[1])
	if err != nil {
		t.Fatal(err)
	}
	var claims map[string]any
	_ = json.Unmarshal(cb, &claims)
	if claims["aud"] != "32555940559.apps.googleusercontent.com" || claims["email"] != saEmail || claims["iss"] != "https://accounts.google.com" {
		t.Errorf("claims %v", claims)
	}
	// Neither a scope nor a target audience: refused.
	code, body = postToken(t, v.emu.TokenURI(), signClaims(t, v.key, true, map[string]any{"aud": "https://oauth2.googleapis.com/token", "iat": now, "exp": now + 3600}))
	if code != 400 || !strings.Contains(body, "no scope") {
		t.Errorf("got %d %s", code, body)
	}
}
