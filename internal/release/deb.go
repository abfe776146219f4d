package release

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/goreleaser/nfpm/v2"
	"github.com/goreleaser/nfpm/v2/deb"
	"github.com/goreleaser/nfpm/v2/files"

	"github.com/fleet-agent/fleet-agent/internal/refusal"
)

// The package's fixed facts. Lintian's verdict on the package is part of
// the tests (deb_test.go); the warnings kept are listed in LintianKept with
// the reason each stays.
const (
	PackageName = "fleet-agent"
	Maintainer  = "fleet-agent maintainers <fleet-agent@users.noreply.github.com>"
	Homepage    = "https://github.com/fleet-agent/fleet-agent"

	debBinary   = "/usr/bin/fleet-agent"
	debUnit     = "/usr/lib/systemd/system/fleet-agent.service"
	debSysusers = "/usr/lib/sysusers.d/fleet-agent.conf"
	debTmpfiles = "/usr/lib/tmpfiles.d/fleet-agent.conf"
	debConfig   = "/etc/fleet-agent/config.yaml"
	debDocDir   = "/usr/share/doc/fleet-agent/"
	debLintian  = "/usr/share/lintian/overrides/fleet-agent"
)

// LintianKept are the lintian tags the package overrides, each with why;
// they are written into the package's lintian overrides file
// (/usr/share/lintian/overrides/fleet-agent) with the reason above each.
// The test fails on any other warning or error lintian reports.
var LintianKept = map[string]string{
	// Lintian excuses Go binaries only when the Debian source package
	// build-depends on golang-go; this package is built outside a Debian
	// source tree, so the excuse does not apply, but the reason does.
	"statically-linked-binary": "A static Go binary (CGO_ENABLED=0) on purpose: the same file runs in the node daemon's image, which has no libc and no dynamic loader.",
	"hardening-no-pie":         "Position-independent Go binaries need a dynamic loader (see statically-linked-binary); Go's runtime checks bounds and has no C stack to protect.",
	"hardening-no-relro":       "Go's internal linker writes no RELRO segment for a static binary; there is no dynamic relocation table to protect.",
	"no-manual-page":           "The command's --help and docs/commands.md (generated from the same command tree and kept true by tests) are its manual.",
}

// DebSpec is one Debian package: one architecture's binary and the files of
// the ops box around it.
type DebSpec struct {
	Binary string // the linux binary for Arch
	Arch   string // amd64 or arm64
	// Version is the git describe version; DebVersion makes it one dpkg
	// orders.
	Version  string
	Revision string
	// Unit and Config are the repository's deploy/systemd/fleet-agent.service
	// and deploy/config.example.yaml.
	Unit   string
	Config string
	// MTime is the commit's time, written into every file of the package.
	MTime time.Time
}

// DebVersion turns a git describe version into a Debian one that dpkg
// orders the way the tags are ordered: the leading v goes; a tag's
// pre-release (v1.0.0-rc.1) sorts before the release (1.0.0~rc.1); commits
// after a tag (-4-gabcdef0) and a dirty tree sort after it (+4.gabcdef0,
// +dirty); an untagged commit becomes 0~<commit>. No hyphen is left, since
// dpkg reads one as the start of a Debian revision.
func DebVersion(v string) string {
	v = strings.TrimPrefix(v, "v")
	suffix := ""
	if b, ok := strings.CutSuffix(v, "-dirty"); ok {
		v, suffix = b, "+dirty"
	}
	if m := describeSuffix.FindStringSubmatch(v); m != nil {
		v, suffix = m[1], "+"+m[2]+".g"+m[3]+suffix
	}
	// A release is a tag (a number, or numbers with dots); anything else
	// (a bare commit hash, even one that starts with a digit) is put below
	// every release, so that apt never holds a box on a test build.
	if !tagged.MatchString(v) {
		v = "0~" + v
	}
	return strings.ReplaceAll(v, "-", "~") + suffix
}

// tagged is a version that is a release: numbers separated by dots, then
// anything; or one number alone. A commit hash of seven or more hex digits
// is not one, whatever its first character.
var tagged = regexp.MustCompile(`^([0-9]+\.[0-9]|[0-9]{1,6}$)`)

// describeSuffix is git describe's "-<commits since the tag>-g<commit>".
var describeSuffix = regexp.MustCompile(`^(.*)-([0-9]+)-g([0-9a-f]+)$`)

// DebFileName is the package's file name as Debian names it.
func DebFileName(version, arch string) string {
	return fmt.Sprintf("%s_%s_%s.deb", PackageName, DebVersion(version), arch)
}

// Sysusers is the sysusers.d entry: the fleet-agent system user and group,
// made by systemd-sysusers at install, so nobody runs useradd by hand.
const Sysusers = `# fleet-agent: the agent's system user (systemd-sysusers).
u fleet-agent - "fleet-agent GitOps pull agent" /var/lib/fleet-agent /usr/sbin/nologin
`

// Tmpfiles is the tmpfiles.d entry: the directories the agent and its
// operator need, with their owners, made by systemd-tmpfiles at install.
// The credentials directory is root's: systemd reads it for
// LoadCredential= before dropping to the agent's user.
const Tmpfiles = `# fleet-agent: its directories (systemd-tmpfiles).
d /etc/fleet-agent 0750 root fleet-agent -
d /etc/fleet-agent/credentials 0700 root root -
z /etc/fleet-agent/config.yaml 0640 root fleet-agent -
d /var/lib/fleet-agent 0700 fleet-agent fleet-agent -
`

// postinst makes the user and the directories and tells systemd about the
// unit. It never starts or enables the service: the example config must be
// edited first. $DPKG_ROOT is set when dpkg installs into another root.
const postinst = `#!/bin/sh
set -e
if [ "$1" = "configure" ]; then
	if command -v systemd-sysusers >/dev/null 2>&1; then
		systemd-sysusers --root="${DPKG_ROOT:-/}" fleet-agent.conf
	fi
	if command -v systemd-tmpfiles >/dev/null 2>&1; then
		systemd-tmpfiles --root="${DPKG_ROOT:-/}" --create fleet-agent.conf
	fi
fi
if [ -z "${DPKG_ROOT:-}" ] && [ -d /run/systemd/system ]; then
	systemctl --system daemon-reload >/dev/null || true
fi
exit 0
`

// postrm tells systemd the unit is gone.
const postrm = `#!/bin/sh
set -e
if [ -z "${DPKG_ROOT:-}" ] && [ -d /run/systemd/system ]; then
	systemctl --system daemon-reload >/dev/null || true
fi
exit 0
`

// BuildDeb writes the package into dir and returns its path.
func BuildDeb(spec DebSpec, dir string) (string, error) {
	for what, p := range map[string]string{"binary": spec.Binary, "unit": spec.Unit, "example config": spec.Config} {
		if _, err := os.Stat(p); err != nil {
			return "", refusal.Wrap(refusal.InvalidInput, err, "the package's %s is missing", what)
		}
	}
	if spec.Arch != "amd64" && spec.Arch != "arm64" {
		return "", refusal.New(refusal.InvalidInput, "architecture %q: the package is built for amd64 or arm64", spec.Arch)
	}
	work, err := os.MkdirTemp("", "fleet-deb-")
	if err != nil {
		return "", refusal.Wrap(refusal.InvalidState, err, "making a work directory")
	}
	defer os.RemoveAll(work)
	unit, err := os.ReadFile(spec.Unit)
	if err != nil {
		return "", refusal.Wrap(refusal.InvalidInput, err, "reading the unit")
	}
	// The repository's unit is for `make install` (/usr/local); the package
	// installs where Debian puts packaged binaries.
	unit = bytes.ReplaceAll(unit, []byte("/usr/local/bin/fleet-agent"), []byte(debBinary))
	version := DebVersion(spec.Version)
	mtime := spec.MTime.UTC()
	changelog, err := gzipMax([]byte(fmt.Sprintf("%s (%s) unstable; urgency=medium\n\n  * Built from commit %s.\n\n -- %s  %s\n",
		PackageName, version, spec.Revision, Maintainer, mtime.Format("Mon, 02 Jan 2006 15:04:05 -0700"))))
	if err != nil {
		return "", err
	}
	generated := map[string][]byte{
		"fleet-agent.service": unit,
		"sysusers.conf":       []byte(Sysusers),
		"tmpfiles.conf":       []byte(Tmpfiles),
		"postinst":            []byte(postinst),
		"postrm":              []byte(postrm),
		"changelog.gz":        changelog,
		"copyright":           []byte(fmt.Sprintf(copyright, mtime.Year())),
		"lintian":             lintianOverrides(),
	}
	for n, b := range generated {
		if err := os.WriteFile(filepath.Join(work, n), b, 0o644); err != nil {
			return "", refusal.Wrap(refusal.InvalidState, err, "writing %s", n)
		}
	}
	fi := func(mode os.FileMode) *files.ContentFileInfo {
		return &files.ContentFileInfo{Mode: mode, MTime: mtime, Owner: "root", Group: "root"}
	}
	info := &nfpm.Info{
		Name:          PackageName,
		Arch:          spec.Arch,
		Platform:      "linux",
		Version:       version,
		VersionSchema: "none",
		Section:       "admin",
		Priority:      "optional",
		Maintainer:    Maintainer,
		Homepage:      Homepage,
		Description: "GitOps pull agent for a compute fleet\n" +
			"fleet-agent follows a reviewed fleet.json in a git repository and\n" +
			"applies it to the fleet's clouds and Kubernetes clusters, with a\n" +
			"plan, policy checks and an audit trail. The package installs the\n" +
			"agent, its systemd unit, its user and directories, and an example\n" +
			"configuration; it does not start the service.",
		MTime: mtime,
		Overridables: nfpm.Overridables{
			Contents: files.Contents{
				{Source: spec.Binary, Destination: debBinary, FileInfo: fi(0o755)},
				{Source: filepath.Join(work, "fleet-agent.service"), Destination: debUnit, FileInfo: fi(0o644)},
				{Source: filepath.Join(work, "sysusers.conf"), Destination: debSysusers, FileInfo: fi(0o644)},
				{Source: filepath.Join(work, "tmpfiles.conf"), Destination: debTmpfiles, FileInfo: fi(0o644)},
				// noreplace: an upgrade keeps the operator's edits (dpkg asks,
				// or keeps them under --force-confold).
				// 0644 in the package as Debian wants; the tmpfiles.d entry
				// makes it 0640 root:fleet-agent once the group exists.
				{Source: spec.Config, Destination: debConfig, Type: files.TypeConfigNoReplace, FileInfo: fi(0o644)},
				{Source: filepath.Join(work, "changelog.gz"), Destination: debDocDir + "changelog.gz", FileInfo: fi(0o644)},
				{Source: filepath.Join(work, "copyright"), Destination: debDocDir + "copyright", FileInfo: fi(0o644)},
				{Source: filepath.Join(work, "lintian"), Destination: debLintian, FileInfo: fi(0o644)},
			},
			Scripts: nfpm.Scripts{
				PostInstall: filepath.Join(work, "postinst"),
				PostRemove:  filepath.Join(work, "postrm"),
			},
			Deb: nfpm.Deb{Compression: "gzip"},
		},
	}
	info = nfpm.WithDefaults(info)
	if err := nfpm.PrepareForPackager(info, "deb"); err != nil {
		return "", refusal.Wrap(refusal.InvalidInput, err, "the package's description")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", refusal.Wrap(refusal.InvalidState, err, "creating %s", dir)
	}
	out := filepath.Join(dir, DebFileName(spec.Version, spec.Arch))
	f, err := os.Create(out)
	if err != nil {
		return "", refusal.Wrap(refusal.InvalidState, err, "creating %s", out)
	}
	if err := deb.Default.Package(info, f); err != nil {
		f.Close()
		os.Remove(out)
		return "", refusal.Wrap(refusal.Internal, err, "writing the package %s", out)
	}
	if err := f.Close(); err != nil {
		return "", refusal.Wrap(refusal.InvalidState, err, "writing %s", out)
	}
	return out, nil
}

// gzipMax compresses as Debian wants documentation compressed: best
// compression, no name or time in the header.
func gzipMax(b []byte) ([]byte, error) {
	var buf bytes.Buffer
	w, err := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	if err != nil {
		return nil, refusal.Wrap(refusal.Internal, err, "compressing the changelog")
	}
	if _, err := w.Write(b); err != nil {
		return nil, refusal.Wrap(refusal.Internal, err, "compressing the changelog")
	}
	if err := w.Close(); err != nil {
		return nil, refusal.Wrap(refusal.Internal, err, "compressing the changelog")
	}
	return buf.Bytes(), nil
}

// copyright is the package's copyright file. The repository states no
// licence, so the file says so rather than guess one.
const copyright = `fleet-agent
Source: https://github.com/fleet-agent/fleet-agent
Copyright (C) %d the fleet-agent authors

The source repository states no licence. Ask its authors before
redistributing this package.
`

// lintianOverrides is the overrides file: LintianKept, sorted, each
// reason as a comment above its tag.
func lintianOverrides() []byte {
	tags := make([]string, 0, len(LintianKept))
	for t := range LintianKept {
		tags = append(tags, t)
	}
	sort.Strings(tags)
	var b bytes.Buffer
	for _, t := range tags {
		fmt.Fprintf(&b, "# %s\n%s: %s\n", LintianKept[t], PackageName, t)
	}
	return b.Bytes()
}
