package main

import (
	"io"
	"log"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	ociregistry "github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/rs/zerolog"

	"github.com/fleet-agent/fleet-agent/internal/agent"
	"github.com/fleet-agent/fleet-agent/internal/config"
	"github.com/fleet-agent/fleet-agent/internal/imagepin"
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
