// Package release is what turns a built fleet-agent into things a team
// installs and verifies: the node daemon's OCI image (built without a
// container daemon, no base image pulled), the Debian package, and the
// checksums of a release. It is used by cmd/fleet-release only, so none of
// it reaches the fleet-agent binary.
package release

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"os"
	"path"
	"sort"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/fleet-agent/fleet-agent/internal/refusal"
)

// The image's fixed facts.
const (
	// BinaryPath is where the binary sits in the image.
	BinaryPath = "/usr/bin/fleet-agent"
	// UID and GID are the image's non-root user, fleet-agent. 65532 is the
	// number distroless images use for "nonroot", so a cluster policy that
	// already admits those admits this one.
	UID = 65532
	GID = 65532
	// DefaultCABundle is Debian's ca-certificates bundle on the build host.
	DefaultCABundle = "/etc/ssl/certs/ca-certificates.crt"
	caPath          = "/etc/ssl/certs/ca-certificates.crt"

	AnnotationSource   = "org.opencontainers.image.source"
	AnnotationRevision = "org.opencontainers.image.revision"
	AnnotationVersion  = "org.opencontainers.image.version"
	AnnotationCreated  = "org.opencontainers.image.created"
	AnnotationTitle    = "org.opencontainers.image.title"
)

// ImageSpec is what the image is made of. Everything that reaches a byte of
// the image is in it, so the same spec (the same commit) gives the same
// digest.
type ImageSpec struct {
	// Binaries maps an architecture (amd64, arm64) to a linux binary built
	// for it.
	Binaries map[string]string
	// CABundle is the PEM bundle copied to /etc/ssl/certs; empty means
	// DefaultCABundle.
	CABundle string
	Source   string
	Revision string
	Version  string
	// Created is the time written into the image: the commit's time, never
	// the clock, so two builds of one commit agree.
	Created time.Time
}

// Architectures is the order of the index's manifests.
var Architectures = []string{"amd64", "arm64"}

// BuildImage makes the multi-architecture index: one image per entry of
// spec.Binaries, each from scratch with two layers (the base files, then
// the binary).
func BuildImage(spec ImageSpec) (v1.ImageIndex, error) {
	if len(spec.Binaries) == 0 {
		return nil, refusal.New(refusal.InvalidInput, "no binaries to put in the image: build them first (make release builds bin/fleet-agent_linux_ARCH)")
	}
	if spec.Revision == "" || spec.Version == "" {
		return nil, refusal.New(refusal.InvalidInput, "the image needs a revision and a version: pass -revision and -version (make image sets them from git)")
	}
	ca := spec.CABundle
	if ca == "" {
		ca = DefaultCABundle
	}
	caPEM, err := os.ReadFile(ca)
	if err != nil {
		return nil, refusal.Wrap(refusal.InvalidInput, err, "reading the CA bundle %s: install Debian's ca-certificates (apt-get install ca-certificates) or pass -ca-bundle", ca)
	}
	created := spec.Created.UTC().Truncate(time.Second)
	annotations := map[string]string{
		AnnotationSource:   spec.Source,
		AnnotationRevision: spec.Revision,
		AnnotationVersion:  spec.Version,
		AnnotationCreated:  created.Format(time.RFC3339),
		AnnotationTitle:    "fleet-agent",
	}
	base, err := layerOf(baseFiles(caPEM), created)
	if err != nil {
		return nil, err
	}
	var idx v1.ImageIndex = empty.Index
	idx = mutate.IndexMediaType(idx, types.OCIImageIndex)
	arches := make([]string, 0, len(spec.Binaries))
	for a := range spec.Binaries {
		arches = append(arches, a)
	}
	sort.Strings(arches)
	for _, arch := range arches {
		bin, err := os.ReadFile(spec.Binaries[arch])
		if err != nil {
			return nil, refusal.Wrap(refusal.InvalidInput, err, "reading the %s binary: build it first", arch)
		}
		binLayer, err := layerOf([]file{
			{name: "usr/", mode: 0o755, dir: true},
			{name: "usr/bin/", mode: 0o755, dir: true},
			{name: BinaryPath[1:], mode: 0o755, data: bin},
		}, created)
		if err != nil {
			return nil, err
		}
		img, err := imageOf(arch, created, annotations, base, binLayer)
		if err != nil {
			return nil, err
		}
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{
			Add: img,
			Descriptor: v1.Descriptor{
				Platform: &v1.Platform{OS: "linux", Architecture: arch},
			},
		})
	}
	return mutate.Annotations(idx, annotations).(v1.ImageIndex), nil
}

func imageOf(arch string, created time.Time, annotations map[string]string, layers ...v1.Layer) (v1.Image, error) {
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	img, err := mutate.AppendLayers(img, layers...)
	if err != nil {
		return nil, refusal.Wrap(refusal.Internal, err, "assembling the %s image", arch)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, refusal.Wrap(refusal.Internal, err, "reading the %s image's config", arch)
	}
	cf = cf.DeepCopy()
	cf.OS = "linux"
	cf.Architecture = arch
	cf.Created = v1.Time{Time: created}
	cf.History = nil
	cf.Config = v1.Config{
		// The node daemon is what the image is for; the agent runs from the
		// same image with the entrypoint given as fleet-agent (Kubernetes:
		// command: [/usr/bin/fleet-agent], args: [run, ...]).
		Entrypoint: []string{BinaryPath, "node"},
		User:       fmt.Sprintf("%d:%d", UID, GID),
		WorkingDir: "/",
		Env: []string{
			"PATH=/usr/bin",
			"SSL_CERT_FILE=" + caPath,
		},
		Labels: annotations,
	}
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return nil, refusal.Wrap(refusal.Internal, err, "writing the %s image's config", arch)
	}
	return mutate.Annotations(img, annotations).(v1.Image), nil
}

// file is one entry of a layer.
type file struct {
	name string
	mode int64
	dir  bool
	uid  int
	data []byte
}

// baseFiles is what a static Go binary needs around it: the user it runs
// as, CA certificates, and a writable /tmp.
func baseFiles(caPEM []byte) []file {
	passwd := fmt.Sprintf("root:x:0:0:root:/root:/sbin/nologin\nfleet-agent:x:%d:%d:fleet-agent:/var/lib/fleet-agent:/sbin/nologin\n", UID, GID)
	group := fmt.Sprintf("root:x:0:\nfleet-agent:x:%d:\n", GID)
	return []file{
		{name: "etc/", mode: 0o755, dir: true},
		{name: "etc/group", mode: 0o644, data: []byte(group)},
		{name: "etc/passwd", mode: 0o644, data: []byte(passwd)},
		{name: "etc/ssl/", mode: 0o755, dir: true},
		{name: "etc/ssl/certs/", mode: 0o755, dir: true},
		{name: caPath[1:], mode: 0o644, data: caPEM},
		{name: "tmp/", mode: 0o1777, dir: true},
		{name: "var/", mode: 0o755, dir: true},
		{name: "var/lib/", mode: 0o755, dir: true},
		{name: "var/lib/fleet-agent/", mode: 0o700, dir: true, uid: UID},
	}
}

// layerOf writes files into a tar with every varying header field fixed
// (time, owner names, format), gzipped by the library at its default level:
// the same files give the same bytes.
func layerOf(files []file, mtime time.Time) (v1.Layer, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range files {
		h := &tar.Header{
			Name:    f.name,
			Mode:    f.mode,
			ModTime: mtime,
			Uid:     f.uid,
			Gid:     f.uid,
			Format:  tar.FormatPAX,
		}
		if f.dir {
			h.Typeflag = tar.TypeDir
		} else {
			h.Typeflag = tar.TypeReg
			h.Size = int64(len(f.data))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, refusal.Wrap(refusal.Internal, err, "writing %s into a layer", path.Clean(f.name))
		}
		if !f.dir {
			if _, err := tw.Write(f.data); err != nil {
				return nil, refusal.Wrap(refusal.Internal, err, "writing %s into a layer", f.name)
			}
		}
	}
	if err := tw.Close(); err != nil {
		return nil, refusal.Wrap(refusal.Internal, err, "closing a layer")
	}
	data := buf.Bytes()
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(data)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, refusal.Wrap(refusal.Internal, err, "compressing a layer")
	}
	return l, nil
}
