package main

import (
	"encoding/json"
	"io"
	"log"
	"net"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	ociregistry "github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/rs/zerolog"

	"github.com/fleet-agent/fleet-agent/internal/agent"
	"github.com/fleet-agent/fleet-agent/internal/config"
	"github.com/fleet-agent/fleet-agent/internal/doctor"
	"github.com/fleet-agent/fleet-agent/internal/imagepin"
	"github.com/fleet-agent/fleet-agent/internal/state"
	"github.com/fleet-agent/fleet-agent/internal/state/statetest"
)

// The running agent's pinner follows substrate.nodeDaemon: a tag at a
// registry is pinned to the pushed digest and the status shows it;
// resolveDigest: false keeps the tag and says so.
func TestNodeDaemonPinnerFollowsTheConfig(t *testing.T) {
	srv := httptest.NewServer(ociregistry.New(ociregistry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(srv.Close)
	ref := strings.TrimPrefix(srv.URL, "http://") + "/team/fleet-agent:v1.2.3"
	idx, err := random.Index(256, 1, 2)
	if err != nil {
		t.Fatal(err)
	}
	tag, _ := name.NewTag(ref)
	if err := remote.WriteIndex(tag, idx, remote.WithContext(t.Context())); err != nil {
		t.Fatal(err)
	}
	d, _ := idx.Digest()
	t.Setenv("DOCKER_CONFIG", t.TempDir())

	for _, resolve := range []bool{true, false} {
		st := statetest.Open(t)
		nd := &config.NodeDaemon{Image: ref, JoinURL: "https://ops.example.com:9465/", ResolveDigest: resolve}
		got := nodeDaemonPinner(st, nd, zerolog.Nop()).Image(t.Context())
		want := imagepin.Pin{Ref: ref, Image: ref + "@" + d.String(), Pinned: true, Source: "registry", At: got.At}
		if !resolve {
			want = imagepin.Pin{Ref: ref, Image: ref, Reason: imagepin.ReasonOff, Detail: got.Detail}
		}
		if got != want {
			t.Fatalf("resolveDigest %v: %+v, want %+v", resolve, got, want)
		}
		v, err := agent.Status(st, "root")
		if err != nil {
			t.Fatal(err)
		}
		if v.NodeDaemonImage == nil || *v.NodeDaemonImage != got {
			t.Fatalf("resolveDigest %v: status shows %+v, want %+v", resolve, v.NodeDaemonImage, got)
		}
	}
}

// doctor, on the state file an agent left, says the node daemon's image is
// not pinned and why, when its registry could not be reached.
func TestDoctorNodeDaemonNotPinned(t *testing.T) {
	dir := t.TempDir()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ref := ln.Addr().String() + "/team/fleet-agent:v1.2.3"
	ln.Close()
	stPath := filepath.Join(dir, "fleet.db")
	st, err := state.Open(stPath, state.Options{})
	if err != nil {
		t.Fatal(err)
	}
	nd := &config.NodeDaemon{Image: ref, JoinURL: "https://ops.example.com:9465/", ResolveDigest: true}
	if got := nodeDaemonPinner(st, nd, zerolog.Nop()).Image(t.Context()); got.Pinned {
		t.Fatalf("pinned at an address nothing listens at: %+v", got)
	}
	st.Close()
	cfg := filepath.Join(dir, "config.yaml")
	text := "git:\n  url: http://127.0.0.1:1/fleet.git\nsubstrate:\n  nodeDaemon: { image: '" + ref + "', joinURL: 'https://ops.example.com:9465/' }\n  join: { listen: '127.0.0.1:0', insecure: true }\n"
	if err := os.WriteFile(cfg, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	out, _, code := cli(t, map[string]string{}, "doctor", "-o", "json", "--config", cfg, "--state", stPath)
	var rep doctor.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err, out)
	}
	var found *doctor.Finding
	for i, f := range rep.Findings {
		if f.Code == "node-daemon-not-pinned" {
			found = &rep.Findings[i]
		}
	}
	if code != 1 || found == nil || found.Severity != doctor.Fail || !strings.Contains(found.Found, imagepin.ReasonUnreachable) || found.Do == "" {
		t.Fatalf("exit %d, finding %+v\n%s", code, found, out)
	}
	// One verdict on the image: no finding calls it fine beside the failure.
	for _, f := range rep.Findings {
		if f.Severity == doctor.OK && strings.Contains(f.Found, ref) {
			t.Errorf("%s is OK and names the image %s while node-daemon-not-pinned fails: %q", f.Code, ref, f.Found)
		}
	}
}
