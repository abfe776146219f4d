package imageref

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-containerregistry/pkg/registry"

	"github.com/fleet-agent/fleet-agent/internal/imagepin"
)

// splitRealm is a registry whose Bearer challenge names realm (a token
// service elsewhere, as Harbor's and GitLab's may be), and which wants the
// token tokenServer hands out; direct serves the same store unguarded, for
// the test's push.
func splitRealm(t *testing.T, realm func() string) (host, direct string) {
	t.Helper()
	reg := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer tok-split" {
			w.Header().Set("WWW-Authenticate", `Bearer realm="`+realm()+`",service="split"`)
			http.Error(w, `{"errors":[{"code":"UNAUTHORIZED","message":"authentication required"}]}`, http.StatusUnauthorized)
			return
		}
		reg.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	open := httptest.NewServer(reg)
	t.Cleanup(open.Close)
	return strings.TrimPrefix(srv.URL, "http://"), strings.TrimPrefix(open.URL, "http://")
}

// tokenServer hands "tok-split" to user:pass on its own loopback port.
func tokenServer(t *testing.T, user, pass string) (url string, asked *int) {
	t.Helper()
	var n int
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n++
		if u, p, ok := r.BasicAuth(); !ok || u != user || p != pass || r.URL.Query().Get("service") != "split" {
			http.Error(w, `{"errors":[{"code":"UNAUTHORIZED","message":"bad credential"}]}`, http.StatusUnauthorized)
			return
		}
		_ = json.NewEncoder(w).Encode(map[string]string{"access_token": "tok-split"})
	}))
	t.Cleanup(srv.Close)
	return srv.URL + "/token", &n
}

// A token service on another loopback port (a private address, as a
// registry's separate token service often is) is followed: the token is
// fetched with the credential and the tag resolves.
func TestResolveRealmOnAnotherLoopbackPort(t *testing.T) {
	realm, asked := tokenServer(t, "ci", "s3cret")
	host, direct := splitRealm(t, func() string { return realm })
	ref := host + "/team/fleet-agent:v1"
	want := push(t, direct+"/team/fleet-agent:v1", "", "").String()
	dockerConfig(t, host, "ci", "s3cret")
	got, err := Resolver{}.Resolve(t.Context(), ref)
	if err != nil {
		t.Fatal(err)
	}
	if got != ref+"@"+want {
		t.Fatalf("resolved %s, want %s@%s", got, ref, want)
	}
	if *asked == 0 {
		t.Fatal("the token service was never asked")
	}
}

// recorder is a transport that notes every host it is asked to reach.
type recorder struct {
	mu    sync.Mutex
	hosts []string
}

func (r *recorder) RoundTrip(req *http.Request) (*http.Response, error) {
	r.mu.Lock()
	r.hosts = append(r.hosts, req.URL.Host)
	r.mu.Unlock()
	return http.DefaultTransport.RoundTrip(req)
}

// A realm on a metadata service (a link-local address, the metadata names,
// an IPv6 link-local address), or a token service redirecting there, is
// refused with the reason, and nothing is sent to it.
func TestResolveRealmAtMetadataIsRefused(t *testing.T) {
	redirector := httptest.NewServer(http.RedirectHandler("http://169.254.169.254/latest/meta-data/", http.StatusFound))
	t.Cleanup(redirector.Close)
	for _, realm := range []string{
		"http://169.254.169.254/token",
		"http://metadata.google.internal/computeMetadata/v1/",
		"http://Metadata.Google.Internal./x",
		"http://[fe80::1]:8080/token",
		"http://[::ffff:169.254.169.254]/token",
		"http://[fd00:ec2::254]/token",
		redirector.URL + "/token",
	} {
		t.Run(realm, func(t *testing.T) {
			host, _ := splitRealm(t, func() string { return realm })
			dockerConfig(t, host, "ci", "s3cret")
			rec := &recorder{}
			_, err := Resolver{Transport: rec}.Resolve(t.Context(), host+"/team/fleet-agent:v1")
			if err == nil || reasonOf(t, err) != imagepin.ReasonBadAnswer || !strings.Contains(err.Error(), "token service") ||
				!strings.Contains(err.Error(), "metadata") {
				t.Fatalf("realm %s: %v", realm, err)
			}
			if strings.Contains(err.Error(), "s3cret") {
				t.Fatalf("the credential is in the error: %v", err)
			}
			for _, h := range rec.hosts {
				if h != host && "http://"+h != redirector.URL {
					t.Fatalf("a request went to %s", h)
				}
			}
		})
	}
}

// The dial of a token request refuses a link-local address whatever name
// led to it: a name that resolves there after it was checked is refused
// at the dial, before a byte is sent.
func TestRealmDialRefusesLinkLocal(t *testing.T) {
	rt := realmTransport()
	req, _ := http.NewRequestWithContext(context.Background(), http.MethodGet, "http://169.254.169.254/latest/", nil)
	_, err := rt.RoundTrip(req)
	var re *realmError
	if !errors.As(err, &re) {
		t.Fatalf("dialling 169.254.169.254: %v, want refused at the dial", err)
	}
}
