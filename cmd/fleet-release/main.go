// Command fleet-release builds what a release ships from binaries already
// built: the node daemon's OCI image (pushed, or written as an OCI layout),
// the Debian packages and SHA256SUMS. The Makefile's image, deb and release
// targets run it; it is a separate command so that none of its libraries
// reach the fleet-agent binary.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"time"

	"github.com/fleet-agent/fleet-agent/internal/refusal"
	"github.com/fleet-agent/fleet-agent/internal/release"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

const usage = `usage:
  fleet-release image -bin amd64=PATH -bin arm64=PATH -version V -revision SHA -source URL -epoch SECONDS [-layout DIR] [-push registry/name:tag [-insecure]]
  fleet-release deb   -bin PATH -arch amd64 -version V -revision SHA -epoch SECONDS -o DIR
  fleet-release sums  DIR
`

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	var err error
	switch args[0] {
	case "image":
		err = imageCmd(ctx, args[1:], stdout, stderr)
	case "deb":
		err = debCmd(args[1:], stdout, stderr)
	case "sums":
		if len(args) != 2 {
			fmt.Fprint(stderr, usage)
			return 2
		}
		err = release.WriteSums(args[1])
	default:
		fmt.Fprintf(stderr, "fleet-release: unknown command %q\n%s", args[0], usage)
		return 2
	}
	if err == nil {
		return 0
	}
	var r *refusal.Error
	if errors.As(err, &r) {
		fmt.Fprintf(stderr, "fleet-release: %s: %s\n", r.Code, r.Message)
		return 1
	}
	fmt.Fprintf(stderr, "fleet-release: usage: %v\n%s", err, usage)
	return 2
}

// binFlag collects -bin ARCH=PATH.
type binFlag map[string]string

func (b binFlag) String() string { return fmt.Sprint(map[string]string(b)) }
func (b binFlag) Set(v string) error {
	arch, p, ok := strings.Cut(v, "=")
	if !ok || arch == "" || p == "" {
		return fmt.Errorf("-bin wants ARCH=PATH, got %q", v)
	}
	b[arch] = p
	return nil
}

func epochTime(s string) (time.Time, error) {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return time.Time{}, refusal.New(refusal.InvalidInput, "-epoch %q is not seconds since 1970: give the commit's time (git log -1 --format=%%ct)", s)
	}
	return time.Unix(n, 0).UTC(), nil
}

func imageCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("image", flag.ContinueOnError)
	fs.SetOutput(stderr)
	bins := binFlag{}
	fs.Var(bins, "bin", "ARCH=PATH of a linux binary (repeat per architecture)")
	var spec release.ImageSpec
	fs.StringVar(&spec.Version, "version", "", "the version (git describe)")
	fs.StringVar(&spec.Revision, "revision", "", "the commit")
	fs.StringVar(&spec.Source, "source", "https://github.com/fleet-agent/fleet-agent", "the source repository's URL")
	fs.StringVar(&spec.CABundle, "ca-bundle", "", "PEM bundle to ship (default Debian's "+release.DefaultCABundle+")")
	epoch := fs.String("epoch", "", "the commit's time in seconds (SOURCE_DATE_EPOCH)")
	layoutDir := fs.String("layout", "", "write the image as an OCI layout into this directory")
	push := fs.String("push", "", "push the image to registry/name:tag")
	insecure := fs.Bool("insecure", false, "allow a plain-HTTP registry for -push")
	if err := fs.Parse(args); err != nil {
		return err
	}
	spec.Binaries = bins
	created, err := epochTime(*epoch)
	if err != nil {
		return err
	}
	spec.Created = created
	// The target is read before anything is built: a typo costs nothing.
	var target release.Target
	if *push != "" {
		t, err := release.ParseTarget(*push, *insecure)
		if err != nil {
			return err
		}
		target = release.Target{Tag: t, Set: true}
	}
	idx, err := release.BuildImage(spec)
	if err != nil {
		return err
	}
	d, err := idx.Digest()
	if err != nil {
		return refusal.Wrap(refusal.Internal, err, "digesting the index")
	}
	fmt.Fprintf(stdout, "image index %s\n", d)
	if *layoutDir != "" {
		if err := release.WriteLayout(*layoutDir, spec.Version, idx); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "wrote OCI layout %s\n", *layoutDir)
	}
	if target.Set {
		ref, err := release.Push(ctx, idx, target.Tag, nil, nil)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "pushed %s\npin it by digest: %s\n", target.Tag, ref)
	}
	return nil
}

func debCmd(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("deb", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var spec release.DebSpec
	fs.StringVar(&spec.Binary, "bin", "", "the linux binary for -arch")
	fs.StringVar(&spec.Arch, "arch", "", "amd64 or arm64")
	fs.StringVar(&spec.Version, "version", "", "the version (git describe)")
	fs.StringVar(&spec.Revision, "revision", "", "the commit")
	fs.StringVar(&spec.Unit, "unit", "deploy/systemd/fleet-agent.service", "the systemd unit")
	fs.StringVar(&spec.Config, "config", "deploy/config.example.yaml", "the example config, installed as /etc/fleet-agent/config.yaml")
	epoch := fs.String("epoch", "", "the commit's time in seconds (SOURCE_DATE_EPOCH)")
	out := fs.String("o", "dist", "the directory to write the package into")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if spec.Version == "" || spec.Revision == "" {
		return refusal.New(refusal.InvalidInput, "the package needs -version and -revision (make deb sets them from git)")
	}
	t, err := epochTime(*epoch)
	if err != nil {
		return err
	}
	spec.MTime = t
	p, err := release.BuildDeb(spec, *out)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "wrote %s\n", p)
	return nil
}
