package imageref

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/fleet-agent/fleet-agent/internal/imagepin"
)

// guard wraps a registry: "" lets every request through; "basic" wants
// user:pass as basic auth; "bearer" answers 401 with a Bearer challenge
// whose realm hands out a token for user:pass only (as Docker Hub, GHCR and
// Harbor do), and wants that token.
func guard(t *testing.T, mode, user, pass string) (host string, tokenAsked *int) {
	t.Helper()
	reg := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	const token = "tok-9f8e7d"
	var asked int
	var srv *httptest.Server
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch mode {
		case "basic":
			if u, p, ok := r.BasicAuth(); !ok || u != user || p != pass {
				w.Header().Set("WWW-Authenticate", `Basic realm="test"`)
				http.Error(w, `{"errors":[{"code":"UNAUTHORIZED","message":"authentication required"}]}`, http.StatusUnauthorized)
				return
			}
		case "bearer":
			if r.URL.Path == "/token" {
				asked++
				if u, p, ok := r.BasicAuth(); !ok || u != user || p != pass {
					http.Error(w, `{"errors":[{"code":"UNAUTHORIZED","message":"bad credential"}]}`, http.StatusUnauthorized)
					return
				}
				if !strings.HasPrefix(r.URL.Query().Get("scope"), "repository:") {
					http.Error(w, "no scope", http.StatusBadRequest)
					return
				}
				_ = json.NewEncoder(w).Encode(map[string]string{"token": token})
				return
			}
			if r.Header.Get("Authorization") != "Bearer "+token {
				w.Header().Set("WWW-Authenticate", `Bearer realm="`+srv.URL+`/token",service="test"`)
				http.Error(w, `{"errors":[{"code":"UNAUTHORIZED","message":"authentication required"}]}`, http.StatusUnauthorized)
				return
			}
		}
		reg.ServeHTTP(w, r)
	})
	srv = httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://"), &asked
}

// push puts a small random multi-platform index at ref, with the
// credential given, and returns its digest.
func push(t *testing.T, ref, user, pass string) v1.Hash {
	t.Helper()
	idx, err := random.Index(512, 1, 2)
	if err != nil {
		t.Fatal(err)
	}
	tag, err := name.NewTag(ref)
	if err != nil {
		t.Fatal(err)
	}
	auth := authn.Anonymous
	if user != "" {
		auth = &authn.Basic{Username: user, Password: pass}
	}
	if err := remote.WriteIndex(tag, idx, remote.WithAuth(auth), remote.WithContext(t.Context())); err != nil {
		t.Fatal(err)
	}
	d, err := idx.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// dockerConfig points the Docker credential chain at a config with one
// registry's credential (none when user is "").
func dockerConfig(t *testing.T, host, user, pass string) {
	t.Helper()
	dir := t.TempDir()
	auths := map[string]any{}
	if user != "" {
		auths[host] = map[string]string{"auth": base64.StdEncoding.EncodeToString([]byte(user + ":" + pass))}
	}
	b, _ := json.Marshal(map[string]any{"auths": auths})
	if err := os.WriteFile(filepath.Join(dir, "config.json"), b, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("DOCKER_CONFIG", dir)
}

// A tag resolves to the digest the push made, through each of the ways a
// registry asks for a credential: none, basic, and the Bearer token flow
// with the credential from the Docker chain.
func TestResolveGivesThePushedDigest(t *testing.T) {
	for _, mode := range []string{"", "basic", "bearer"} {
		t.Run("auth="+mode, func(t *testing.T) {
			host, asked := guard(t, mode, "ci", "s3cret")
			ref := host + "/team/fleet-agent:v1.2.3"
			want := push(t, ref, "ci", "s3cret")
			dockerConfig(t, host, "ci", "s3cret")
			got, err := Resolver{}.Resolve(t.Context(), ref)
			if err != nil {
				t.Fatal(err)
			}
			if got != ref+"@"+want.String() {
				t.Fatalf("resolved %s, want %s@%s", got, ref, want)
			}
			if mode == "bearer" && *asked == 0 {
				t.Fatal("the token endpoint was never asked: the Bearer flow was not exercised")
			}
		})
	}
}

// A digest reference is given back without a request: nothing listens at
// its registry.
func TestResolveKeepsADigestWithoutAsking(t *testing.T) {
	ref := "127.0.0.1:1/team/fleet-agent:v1@sha256:" + strings.Repeat("ab", 32)
	got, err := Resolver{}.Resolve(t.Context(), ref)
	if err != nil || got != ref {
		t.Fatalf("got %q, %v", got, err)
	}
}

func reasonOf(t *testing.T, err error) string {
	t.Helper()
	var ie *imagepin.Error
	if !errors.As(err, &ie) {
		t.Fatalf("error %v carries no reason", err)
	}
	return ie.Reason
}

// A registry that wants a credential the chain does not have, a tag it
// does not have, and an address nothing answers at each give a reason and
// say what to fix; no credential is in the message.
func TestResolveFailuresSayWhatToFix(t *testing.T) {
	host, _ := guard(t, "bearer", "ci", "s3cret")
	push(t, host+"/team/fleet-agent:v1", "ci", "s3cret")

	dockerConfig(t, host, "ci", "wrong-password-xyz")
	_, err := Resolver{}.Resolve(t.Context(), host+"/team/fleet-agent:v1")
	if err == nil || reasonOf(t, err) != imagepin.ReasonRefused || !strings.Contains(err.Error(), "docker login") {
		t.Fatalf("a refused credential: %v", err)
	}
	if strings.Contains(err.Error(), "wrong-password-xyz") {
		t.Fatalf("the credential is in the error: %v", err)
	}

	dockerConfig(t, host, "ci", "s3cret")
	_, err = Resolver{}.Resolve(t.Context(), host+"/team/fleet-agent:nope")
	if err == nil || reasonOf(t, err) != imagepin.ReasonRefused || !strings.Contains(err.Error(), "check the name and tag") {
		t.Fatalf("a missing tag: %v", err)
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close()
	_, err = Resolver{}.Resolve(t.Context(), dead+"/team/fleet-agent:v1")
	if err == nil || reasonOf(t, err) != imagepin.ReasonUnreachable || !strings.Contains(err.Error(), "cannot be reached") {
		t.Fatalf("an unreachable registry: %v", err)
	}
}

// hostile answers /v2/ with 200 and the manifest's HEAD with what answer
// writes.
func hostile(t *testing.T, answer func(w http.ResponseWriter, r *http.Request)) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v2/" {
			w.WriteHeader(http.StatusOK)
			return
		}
		answer(w, r)
	}))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

// A hostile registry gets a clear error: headers far over the bound, a
// digest header that is not a digest (or none), and an answer slower than
// the deadline, which is kept to.
func TestResolveHostileRegistry(t *testing.T) {
	dockerConfig(t, "", "", "")
	huge := hostile(t, func(w http.ResponseWriter, r *http.Request) {
		for i := range 40 {
			w.Header().Set("X-Junk-"+string(rune('a'+i%26))+strings.Repeat("x", i), strings.Repeat("j", 4000))
		}
		w.Header().Set("Docker-Content-Digest", "sha256:"+strings.Repeat("ab", 32))
		w.WriteHeader(http.StatusOK)
	})
	_, err := Resolver{}.Resolve(t.Context(), huge+"/a/b:v1")
	if err == nil || reasonOf(t, err) != imagepin.ReasonBadAnswer || !strings.Contains(err.Error(), "headers over") {
		t.Fatalf("huge headers: %v", err)
	}

	for _, bad := range []string{"", "sha256:abc", "md5:" + strings.Repeat("ab", 16), "sha256:" + strings.Repeat("AB", 32),
		"sha256:" + strings.Repeat("ab", 32) + "\t;rm", strings.Repeat("z", 3000)} {
		h := hostile(t, func(w http.ResponseWriter, r *http.Request) {
			if bad != "" {
				w.Header().Set("Docker-Content-Digest", bad)
			}
			w.WriteHeader(http.StatusOK)
		})
		_, err := Resolver{}.Resolve(t.Context(), h+"/a/b:v1")
		if err == nil || reasonOf(t, err) != imagepin.ReasonBadAnswer || !strings.Contains(err.Error(), "without a digest") {
			t.Fatalf("digest header %q: %v", bad, err)
		}
		if len(err.Error()) > 600 {
			t.Fatalf("the registry's header is echoed whole (%d bytes)", len(err.Error()))
		}
	}

	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	slow := hostile(t, func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})
	const deadline = 300 * time.Millisecond
	start := time.Now()
	_, err = Resolver{Timeout: deadline}.Resolve(t.Context(), slow+"/a/b:v1")
	took := time.Since(start)
	if err == nil || reasonOf(t, err) != imagepin.ReasonUnreachable || !strings.Contains(err.Error(), "did not answer") {
		t.Fatalf("a slow registry: %v", err)
	}
	// The request ends at the deadline, not when the server lets go: the
	// server lets go only at the test's end.
	if took > 10*deadline {
		t.Fatalf("a slow registry held the resolution %s with a deadline of %s", took, deadline)
	}
	if errors.Is(t.Context().Err(), context.Canceled) {
		t.Fatal("the test's context ended")
	}
}

// A credential helper that never answers does not hold the resolution past
// its deadline, is killed then (with what it started), and leaves nothing
// held: the next resolution, of a registry it does not serve, gets through.
func TestResolveHungCredentialHelper(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "never")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	// Held open for writing until the test ends: the helper's read of it
	// blocks until then.
	hold, err := os.OpenFile(fifo, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { hold.Close() })
	pids := filepath.Join(dir, "pids")
	// The helper starts a child of its own that hangs too, as a shell
	// script calling a cloud CLI does.
	helper := filepath.Join(dir, "docker-credential-hang")
	script := "#!/bin/sh\necho $$ >> " + pids + "\n(echo $$ >/dev/null; sh -c 'echo $$ >> " + pids + "; exec cat " + fifo + "' ) &\nexec cat " + fifo + " >/dev/null\n"
	if err := os.WriteFile(helper, []byte(script), 0o700); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir+string(os.PathListSeparator)+os.Getenv("PATH"))
	host, _ := guard(t, "", "", "")
	other, _ := guard(t, "", "", "")
	want := push(t, other+"/a/b:v1", "", "")
	b, _ := json.Marshal(map[string]any{"credHelpers": map[string]string{host: "hang"}})
	if err := os.WriteFile(filepath.Join(dir, "config.json"), b, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("DOCKER_CONFIG", dir)
	const deadline = 300 * time.Millisecond
	start := time.Now()
	_, err = Resolver{Timeout: deadline}.Resolve(t.Context(), host+"/a/b:v1")
	took := time.Since(start)
	// Named as the helper's failure, not the registry's: the registry was
	// never asked.
	if err == nil || reasonOf(t, err) != imagepin.ReasonCredential || !strings.Contains(err.Error(), "docker-credential-hang did not answer") {
		t.Fatalf("a hung credential helper: %v", err)
	}
	if took > 10*deadline {
		t.Fatalf("a hung credential helper held the resolution %s with a deadline of %s", took, deadline)
	}
	// The next resolution has a deadline of its own: were the chain still
	// held by the hung helper, it would not answer within it.
	got, err := Resolver{Timeout: 5 * time.Second}.Resolve(t.Context(), other+"/a/b:v1")
	if err != nil || got != other+"/a/b:v1@"+want.String() {
		t.Fatalf("after a hung helper, another registry: %q, %v", got, err)
	}
	// Both processes are gone once the resolution that ran them returned:
	// polled (the kill and the reaping happen beside the answer) until the
	// test's own deadline.
	for {
		raw, _ := os.ReadFile(pids)
		alive := []string{}
		for _, f := range strings.Fields(string(raw)) {
			if _, err := os.Stat("/proc/" + f + "/cmdline"); err == nil {
				if st, _ := os.ReadFile("/proc/" + f + "/stat"); !strings.Contains(string(st), ") Z ") {
					alive = append(alive, f)
				}
			}
		}
		if len(strings.Fields(string(raw))) == 2 && len(alive) == 0 {
			break
		}
		select {
		case <-t.Context().Done():
			t.Fatalf("the hung helper's processes %v are still running (of %q)", alive, raw)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// A credential helper that answers gives the credential, the Bearer flow
// included; one that says it has none leaves the request anonymous; one
// that fails is a credential error, and what it wrote to its standard
// error reaches neither the error nor the agent's own standard error.
func TestResolveCredentialHelper(t *testing.T) {
	for _, c := range []struct {
		name, script, reason, names string
	}{
		{name: "answers", script: `read url; printf '{"ServerURL":"%s","Username":"ci","Secret":"s3cret"}' "$url"`},
		{name: "none", script: `echo "credentials not found in native keychain"; exit 1`, reason: imagepin.ReasonRefused},
		{name: "fails", script: `echo "SECRET-ON-STDERR" >&2; echo "boom"; exit 3`, reason: imagepin.ReasonCredential, names: "docker-credential-t failed"},
		// An answer far past any credential's size is not read past the
		// cap (the agent's memory), and is no credential.
		{name: "floods", script: `head -c 67108864 /dev/zero | tr '\0' A`, reason: imagepin.ReasonCredential, names: "docker-credential-t failed"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			helper := filepath.Join(dir, "docker-credential-t")
			if err := os.WriteFile(helper, []byte("#!/bin/sh\n"+c.script+"\n"), 0o700); err != nil {
				t.Fatal(err)
			}
			t.Setenv("PATH", dir+string(os.PathListSeparator)+os.Getenv("PATH"))
			host, asked := guard(t, "bearer", "ci", "s3cret")
			ref := host + "/team/a:v1"
			want := push(t, ref, "ci", "s3cret")
			b, _ := json.Marshal(map[string]any{"credHelpers": map[string]string{host: "t"}})
			if err := os.WriteFile(filepath.Join(dir, "config.json"), b, 0o600); err != nil {
				t.Fatal(err)
			}
			t.Setenv("DOCKER_CONFIG", dir)
			// The process's standard error, where the library let a
			// helper's go.
			stderr, err := os.Create(filepath.Join(dir, "stderr"))
			if err != nil {
				t.Fatal(err)
			}
			saved := os.Stderr
			os.Stderr = stderr
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			got, err := Resolver{Timeout: 10 * time.Second}.Resolve(t.Context(), ref)
			runtime.ReadMemStats(&after)
			os.Stderr = saved
			// The registry and the request allocate a few megabytes; the
			// flood is 64 MiB, which an uncapped read would allocate at
			// least once.
			if grown := after.TotalAlloc - before.TotalAlloc; grown > 32<<20 {
				t.Errorf("the resolution allocated %d MiB", grown>>20)
			}
			if b, _ := os.ReadFile(stderr.Name()); len(b) > 0 {
				t.Errorf("the helper wrote to the agent's standard error: %q", b)
			}
			if c.reason == "" {
				if err != nil || got != ref+"@"+want.String() || *asked == 0 {
					t.Fatalf("got %q, %v (token asked %d times)", got, err, *asked)
				}
				return
			}
			if err == nil || reasonOf(t, err) != c.reason || !strings.Contains(err.Error(), c.names) {
				t.Fatalf("got %q, %v; want reason %s naming %q", got, err, c.reason, c.names)
			}
			if strings.Contains(err.Error(), "SECRET-ON-STDERR") {
				t.Fatalf("the helper's standard error is in the error: %v", err)
			}
		})
	}
}

// rawRegistry answers /v2/ with 200 and every other request with the bytes
// of answer as they are (a header no net/http server would write).
func rawRegistry(t *testing.T, answer string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				br := bufio.NewReader(c)
				for {
					req, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					if req.URL.Path == "/v2/" {
						io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
						continue
					}
					io.WriteString(c, answer)
					return
				}
			}()
		}
	}()
	return ln.Addr().String()
}

// Answers that are the registry's fault, not the network's, are
// registryBadAnswer: two digest headers that disagree (neither is taken),
// a header with a bare CR, a redirect loop. Two headers that agree are one
// digest.
func TestResolveBadAnswersAreBadAnswers(t *testing.T) {
	dockerConfig(t, "", "", "")
	a, b := "sha256:"+strings.Repeat("ab", 32), "sha256:"+strings.Repeat("cd", 32)
	two := hostile(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Add("Docker-Content-Digest", a)
		w.Header().Add("Docker-Content-Digest", b)
		w.WriteHeader(http.StatusOK)
	})
	_, err := Resolver{}.Resolve(t.Context(), two+"/a/b:v1")
	if err == nil || reasonOf(t, err) != imagepin.ReasonBadAnswer || !strings.Contains(err.Error(), "disagree") {
		t.Fatalf("two digests: %v", err)
	}

	same := hostile(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Add("Docker-Content-Digest", a)
		w.Header().Add("Docker-Content-Digest", a)
		w.WriteHeader(http.StatusOK)
	})
	if got, err := (Resolver{}).Resolve(t.Context(), same+"/a/b:v1"); err != nil || got != same+"/a/b:v1@"+a {
		t.Fatalf("the same digest twice: %q, %v", got, err)
	}

	cr := rawRegistry(t, "HTTP/1.1 200 OK\r\nDocker-Content-Digest: "+a+"\rX-Evil: 1\r\nContent-Length: 0\r\n\r\n")
	_, err = Resolver{}.Resolve(t.Context(), cr+"/a/b:v1")
	if err == nil || reasonOf(t, err) != imagepin.ReasonBadAnswer {
		t.Fatalf("a header with a bare CR: %v", err)
	}

	loop := hostile(t, func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, r.URL.Path, http.StatusFound)
	})
	_, err = Resolver{}.Resolve(t.Context(), loop+"/a/b:v1")
	if err == nil || reasonOf(t, err) != imagepin.ReasonBadAnswer || !strings.Contains(err.Error(), "redirect") {
		t.Fatalf("a redirect loop: %v", err)
	}

	pingLoop := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, r.URL.Path, http.StatusFound)
	}))
	t.Cleanup(pingLoop.Close)
	_, err = Resolver{}.Resolve(t.Context(), strings.TrimPrefix(pingLoop.URL, "http://")+"/a/b:v1")
	if err == nil || reasonOf(t, err) != imagepin.ReasonBadAnswer || !strings.Contains(err.Error(), "redirect") {
		t.Fatalf("a redirect loop at /v2/: %v", err)
	}
}
