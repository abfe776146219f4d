package release

import (
	"encoding/base64"
	"encoding/json"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/fleet-agent/fleet-agent/internal/refusal"
)

func testSpec(t *testing.T) ImageSpec {
	return ImageSpec{
		Binaries: testBinaries(t),
		Source:   "https://github.com/fleet-agent/fleet-agent",
		Revision: testRevision,
		Version:  testVersion,
		Created:  testCreated,
	}
}

func digestOf(t *testing.T, idx v1.ImageIndex) v1.Hash {
	t.Helper()
	d, err := idx.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// The same commit gives the same digest: the binaries are built a second
// time into another directory and the image assembled again from them.
// A different revision must give a different digest, or the comparison
// would prove nothing.
func TestImageOfOneCommitHasOneDigest(t *testing.T) {
	spec := testSpec(t)
	first, err := BuildImage(spec)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	again := map[string]string{}
	for _, arch := range Architectures {
		out := filepath.Join(dir, "fleet-agent_linux_"+arch)
		if b, err := goBuild(repoRoot(t), arch, out, testVersion, testRevision); err != nil {
			t.Fatalf("second build: %v\n%s", err, b)
		}
		again[arch] = out
	}
	spec2 := spec
	spec2.Binaries = again
	second, err := BuildImage(spec2)
	if err != nil {
		t.Fatal(err)
	}
	d1, d2 := digestOf(t, first), digestOf(t, second)
	if d1 != d2 {
		t.Fatalf("two builds of one commit: %s and %s", d1, d2)
	}
	t.Logf("index digest of both builds: %s", d1)
	spec3 := spec
	spec3.Revision = strings.Repeat("5", 40)
	other, err := BuildImage(spec3)
	if err != nil {
		t.Fatal(err)
	}
	if digestOf(t, other) == d1 {
		t.Fatal("another revision gave the same digest: the digest does not depend on the inputs")
	}
}

// The index holds one OCI image per architecture, each from scratch (two
// layers: base files, binary), non-root, entrypoint `fleet-agent node`,
// annotated with source, revision and version; and the image adds under
// 1 MiB to the binary.
func TestImageIsTheBinaryAndLittleElse(t *testing.T) {
	spec := testSpec(t)
	idx, err := BuildImage(spec)
	if err != nil {
		t.Fatal(err)
	}
	mt, _ := idx.MediaType()
	if mt != types.OCIImageIndex {
		t.Fatalf("index media type %s", mt)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]string{AnnotationSource: spec.Source, AnnotationRevision: testRevision, AnnotationVersion: testVersion} {
		if im.Annotations[k] != want {
			t.Errorf("index annotation %s = %q, want %q", k, im.Annotations[k], want)
		}
	}
	if len(im.Manifests) != len(Architectures) {
		t.Fatalf("%d manifests, want %d", len(im.Manifests), len(Architectures))
	}
	for i, desc := range im.Manifests {
		arch := Architectures[i]
		if desc.Platform == nil || desc.Platform.OS != "linux" || desc.Platform.Architecture != arch {
			t.Fatalf("manifest %d platform %+v, want linux/%s", i, desc.Platform, arch)
		}
		img, err := idx.Image(desc.Digest)
		if err != nil {
			t.Fatal(err)
		}
		cf, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		if cf.Architecture != arch || cf.OS != "linux" {
			t.Errorf("%s config says %s/%s", arch, cf.OS, cf.Architecture)
		}
		if strings.Join(cf.Config.Entrypoint, " ") != BinaryPath+" node" {
			t.Errorf("%s entrypoint %q", arch, cf.Config.Entrypoint)
		}
		if cf.Config.User == "" || strings.HasPrefix(cf.Config.User, "0") || strings.HasPrefix(cf.Config.User, "root") {
			t.Errorf("%s runs as %q, want a non-root user", arch, cf.Config.User)
		}
		if cf.Config.Labels[AnnotationRevision] != testRevision {
			t.Errorf("%s labels %v", arch, cf.Config.Labels)
		}
		m, err := img.Manifest()
		if err != nil {
			t.Fatal(err)
		}
		if m.Annotations[AnnotationRevision] != testRevision {
			t.Errorf("%s manifest annotations %v", arch, m.Annotations)
		}
		layers, err := img.Layers()
		if err != nil {
			t.Fatal(err)
		}
		if len(layers) != 2 {
			t.Fatalf("%s has %d layers, want 2 (base files, binary)", arch, len(layers))
		}
		fi, err := os.Stat(spec.Binaries[arch])
		if err != nil {
			t.Fatal(err)
		}
		var compressed, uncompressed int64
		for _, l := range layers {
			s, err := l.Size()
			if err != nil {
				t.Fatal(err)
			}
			compressed += s
			rc, err := l.Uncompressed()
			if err != nil {
				t.Fatal(err)
			}
			n, err := io.Copy(io.Discard, rc)
			rc.Close()
			if err != nil {
				t.Fatal(err)
			}
			uncompressed += n
		}
		added := uncompressed - fi.Size()
		t.Logf("%s: binary %d bytes; image layers %d bytes compressed, %d unpacked (adds %d bytes)", arch, fi.Size(), compressed, uncompressed, added)
		if added >= 1<<20 {
			t.Errorf("%s: the image adds %d bytes to the binary, want under 1 MiB", arch, added)
		}
	}
}

// registryServer is go-containerregistry's registry on loopback; with
// user set it answers 401 to a request without that user's basic auth.
func registryServer(t *testing.T, user, pass string) string {
	t.Helper()
	reg := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	h := reg
	if user != "" {
		h = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			u, p, ok := r.BasicAuth()
			if !ok || u != user || p != pass {
				w.Header().Set("WWW-Authenticate", `Basic realm="test"`)
				http.Error(w, `{"errors":[{"code":"UNAUTHORIZED","message":"authentication required"}]}`, http.StatusUnauthorized)
				return
			}
			reg.ServeHTTP(w, r)
		})
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

// dockerConfig points the standard Docker credential chain at a config
// holding auths (host -> "user:pass"), or none.
func dockerConfig(t *testing.T, auths map[string]string) {
	t.Helper()
	dir := t.TempDir()
	entries := map[string]map[string]string{}
	for host, up := range auths {
		u, p, _ := strings.Cut(up, ":")
		// "auth" is what every client reads (skopeo reads only it); the
		// Docker credential chain reads it too.
		entries[host] = map[string]string{"auth": base64.StdEncoding.EncodeToString([]byte(u + ":" + p))}
	}
	b, err := json.Marshal(map[string]any{"auths": entries})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), b, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("DOCKER_CONFIG", dir)
}

// The image as an image: pushed with the Docker credential chain to a
// registry that wants a login, pulled back by Debian's skopeo, unpacked by
// Debian's umoci, and its entrypoint (as the unpacked bundle's config
// says it) run from the unpacked root.
func TestImagePushedPulledUnpackedRuns(t *testing.T) {
	host := registryServer(t, "ci", "s3cret")
	dockerConfig(t, map[string]string{host: "ci:s3cret"})
	idx, err := BuildImage(testSpec(t))
	if err != nil {
		t.Fatal(err)
	}
	target, err := ParseTarget(host+"/fleet/fleet-agent:"+testVersion, true)
	if err != nil {
		t.Fatal(err)
	}
	ref, err := Push(t.Context(), idx, target, authn.DefaultKeychain, nil)
	if err != nil {
		t.Fatal(err)
	}
	if ref.DigestStr() != digestOf(t, idx).String() {
		t.Fatalf("pushed %s, built %s", ref, digestOf(t, idx))
	}

	// skopeo reads the same credentials file format, given explicitly.
	authFile := filepath.Join(os.Getenv("DOCKER_CONFIG"), "config.json")
	raw := run(t, "skopeo", "inspect", "--raw", "--tls-verify=false", "--authfile", authFile, "docker://"+host+"/fleet/fleet-agent:"+testVersion)
	var got v1.IndexManifest
	if err := json.Unmarshal([]byte(raw), &got); err != nil {
		t.Fatalf("skopeo inspect --raw: %v\n%s", err, raw)
	}
	if len(got.Manifests) != 2 || got.Annotations[AnnotationRevision] != testRevision {
		t.Fatalf("the registry's index, as skopeo reads it: %s", raw)
	}
	dir := t.TempDir()
	layoutDir := filepath.Join(dir, "oci")
	run(t, "skopeo", "copy", "--src-tls-verify=false", "--authfile", authFile, "--override-arch", "amd64", "--override-os", "linux",
		"docker://"+ref.String(), "oci:"+layoutDir+":pulled")
	bundle := filepath.Join(dir, "bundle")
	run(t, "umoci", "unpack", "--rootless", "--image", layoutDir+":pulled", bundle)

	rootfs := filepath.Join(bundle, "rootfs")
	var rt struct {
		Process struct {
			Args []string `json:"args"`
			User struct {
				UID int `json:"uid"`
			} `json:"user"`
		} `json:"process"`
	}
	cfg, err := os.ReadFile(filepath.Join(bundle, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(cfg, &rt); err != nil {
		t.Fatal(err)
	}
	if len(rt.Process.Args) != 2 || rt.Process.Args[1] != "node" {
		t.Fatalf("the unpacked image's process: %v", rt.Process.Args)
	}
	if rt.Process.User.UID == 0 {
		t.Fatal("the unpacked image runs as uid 0")
	}
	for _, f := range []string{"etc/ssl/certs/ca-certificates.crt", "etc/passwd"} {
		if fi, err := os.Stat(filepath.Join(rootfs, f)); err != nil || fi.Size() == 0 {
			t.Fatalf("%s in the unpacked root: %v", f, err)
		}
	}
	entry := filepath.Join(rootfs, rt.Process.Args[0])
	help := run(t, entry, append(rt.Process.Args[1:], "--help")...)
	if !strings.Contains(help, "node") {
		t.Fatalf("%s node --help: %s", rt.Process.Args[0], help)
	}
	version := run(t, entry, "version")
	if !strings.Contains(version, testRevision) || !strings.Contains(version, testVersion) {
		t.Fatalf("version from the unpacked image: %s", version)
	}
}

func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), name, args...)
	out, err := cmd.Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("%s %s: %v\n%s\n%s", name, strings.Join(args, " "), err, out, stderr)
	}
	return string(out)
}

// A push that cannot happen says what to fix: the target's form, the
// credential, or the registry's address.
func TestPushRefusalsNameTheFix(t *testing.T) {
	for _, bad := range []string{"", "Registry.example/UPPER/name:tag", "registry.example/name@sha256:" + strings.Repeat("a", 64), "registry.example/name:bad tag"} {
		_, err := ParseTarget(bad, false)
		if refusal.CodeOf(err) != refusal.InvalidInput || !strings.Contains(err.Error(), "registry/name:tag") {
			t.Errorf("PUSH=%q: %v", bad, err)
		}
	}

	idx, err := BuildImage(testSpec(t))
	if err != nil {
		t.Fatal(err)
	}

	// A registry that wants a login, and a Docker config without one.
	host := registryServer(t, "ci", "s3cret")
	dockerConfig(t, nil)
	target, err := ParseTarget(host+"/fleet/fleet-agent:v1", true)
	if err != nil {
		t.Fatal(err)
	}
	_, err = Push(t.Context(), idx, target, authn.DefaultKeychain, nil)
	if refusal.CodeOf(err) != refusal.Unavailable || !strings.Contains(err.Error(), "docker login "+host) {
		t.Fatalf("push without a credential: %v", err)
	}
	// A wrong credential is the same fix.
	dockerConfig(t, map[string]string{host: "ci:wrong"})
	_, err = Push(t.Context(), idx, target, authn.DefaultKeychain, nil)
	if !strings.Contains(fmtErr(err), "docker login "+host) {
		t.Fatalf("push with a wrong credential: %v", err)
	}

	// A port nobody listens on: a listener is opened and closed to find one.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gone := l.Addr().String()
	l.Close()
	target, err = ParseTarget(gone+"/fleet/fleet-agent:v1", true)
	if err != nil {
		t.Fatal(err)
	}
	_, err = Push(t.Context(), idx, target, authn.DefaultKeychain, nil)
	if refusal.CodeOf(err) != refusal.Unavailable || !strings.Contains(err.Error(), "registry "+gone+" cannot be reached") {
		t.Fatalf("push to a closed port: %v", err)
	}
}

func fmtErr(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}
