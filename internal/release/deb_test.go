package release

import (
	"bytes"
	"crypto/sha256"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

func buildTestDeb(t *testing.T, version, dir string) string {
	t.Helper()
	root := repoRoot(t)
	p, err := BuildDeb(DebSpec{
		Binary:   testBinary(t, "amd64"),
		Arch:     "amd64",
		Version:  version,
		Revision: testRevision,
		Unit:     filepath.Join(root, "deploy/systemd/fleet-agent.service"),
		Config:   filepath.Join(root, "deploy/config.example.yaml"),
		MTime:    testCreated,
	}, dir)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

var lintianLine = regexp.MustCompile(`^([EWIPXNOC]): [^:]+: ([a-z0-9][a-z0-9+.-]*)`)

// Debian's lintian finds no error in the package, and no warning except
// those LintianKept explains. The same inputs give the same bytes.
func TestDebPassesLintian(t *testing.T) {
	dir := t.TempDir()
	deb := buildTestDeb(t, testVersion, dir)
	again := buildTestDeb(t, testVersion, t.TempDir())
	if sumOf(t, deb) != sumOf(t, again) {
		t.Fatal("two packages of one commit differ")
	}
	if filepath.Base(deb) != "fleet-agent_0.42.0_amd64.deb" {
		t.Fatalf("package file name %s", filepath.Base(deb))
	}
	cmd := exec.CommandContext(t.Context(), "lintian", "--no-tag-display-limit", deb)
	out, err := cmd.CombinedOutput()
	// lintian exits 1 when it reports an error; its report says which.
	if _, ok := err.(*exec.ExitError); err != nil && !ok {
		t.Fatalf("lintian: %v\n%s", err, out)
	}
	for _, line := range strings.Split(string(out), "\n") {
		m := lintianLine.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		switch m[1] {
		case "E":
			t.Errorf("lintian error: %s", line)
		case "W":
			if _, kept := LintianKept[m[2]]; !kept {
				t.Errorf("lintian warning not explained in LintianKept: %s", line)
			}
		}
	}
	t.Logf("lintian:\n%s", out)
}

func sumOf(t *testing.T, p string) [32]byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return sha256.Sum256(b)
}

// The package installed for real by dpkg into a scratch root: its files in
// place, the user and directories made by its own sysusers.d and
// tmpfiles.d entries, the unit passing systemd-analyze verify there, the
// example config a conffile that an upgrade keeps once edited, and
// nothing started.
func TestDebInstallsIntoAScratchRoot(t *testing.T) {
	root := t.TempDir()
	for _, d := range []string{"var/lib/dpkg/info", "var/lib/dpkg/updates", "var/lib/dpkg/triggers", "etc", "usr/bin", "usr/lib/systemd"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{"var/lib/dpkg/status", "var/lib/dpkg/available", "etc/shadow", "etc/gshadow"} {
		if err := os.WriteFile(filepath.Join(root, f), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(root, "etc/passwd"), []byte("root:x:0:0:root:/root:/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "etc/group"), []byte("root:x:0:\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// What systemd-analyze verify needs of the base system in that root:
	// the host's own units (sysinit.target and the rest) and kill(1), which
	// the unit's ExecReload runs; /bin is /usr/bin as on Debian.
	if err := os.Symlink("usr/bin", filepath.Join(root, "bin")); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.CommandContext(t.Context(), "cp", "-a", "/usr/lib/systemd/system", "/usr/bin/kill", filepath.Join(root, "usr/lib/systemd")).CombinedOutput(); err != nil {
		t.Fatalf("seeding the root: %v\n%s", err, out)
	}
	if err := os.Rename(filepath.Join(root, "usr/lib/systemd/kill"), filepath.Join(root, "usr/bin/kill")); err != nil {
		t.Fatal(err)
	}
	dpkg := func(deb string, extra ...string) {
		t.Helper()
		args := append([]string{"--root=" + root, "--force-script-chrootless", "--force-not-root", "--log=/dev/null"}, extra...)
		args = append(args, "-i", deb)
		cmd := exec.CommandContext(t.Context(), "dpkg", args...)
		cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("dpkg -i %s: %v\n%s", filepath.Base(deb), err, out)
		}
	}
	v1 := buildTestDeb(t, "v1.0.0", t.TempDir())
	dpkg(v1)

	for _, f := range []string{"usr/bin/fleet-agent", "usr/lib/systemd/system/fleet-agent.service", "usr/lib/sysusers.d/fleet-agent.conf", "usr/lib/tmpfiles.d/fleet-agent.conf", "etc/fleet-agent/config.yaml"} {
		if _, err := os.Stat(filepath.Join(root, f)); err != nil {
			t.Errorf("installed: %v", err)
		}
	}
	conffiles, err := os.ReadFile(filepath.Join(root, "var/lib/dpkg/info/fleet-agent.conffiles"))
	if err != nil || strings.TrimSpace(string(conffiles)) != "/etc/fleet-agent/config.yaml" {
		t.Fatalf("conffiles: %q %v", conffiles, err)
	}
	passwd, _ := os.ReadFile(filepath.Join(root, "etc/passwd"))
	if !regexp.MustCompile(`(?m)^fleet-agent:x:[0-9]+:[0-9]+:`).Match(passwd) {
		t.Fatalf("the postinst did not make the fleet-agent user (sysusers.d): %s", passwd)
	}
	if fi, err := os.Stat(filepath.Join(root, "etc/fleet-agent/credentials")); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("the credentials directory (tmpfiles.d): %v %v", fi, err)
	}
	if fi, err := os.Stat(filepath.Join(root, "var/lib/fleet-agent")); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("the state directory (tmpfiles.d): %v %v", fi, err)
	}
	unit, err := os.ReadFile(filepath.Join(root, "usr/lib/systemd/system/fleet-agent.service"))
	if err != nil || !bytes.Contains(unit, []byte("ExecStart=/usr/bin/fleet-agent run")) {
		t.Fatalf("the packaged unit must start the packaged binary: %v\n%s", err, unit)
	}
	// The maintainer scripts never start, restart or enable the service.
	for _, s := range []string{"postinst", "postrm"} {
		b, err := os.ReadFile(filepath.Join(root, "var/lib/dpkg/info/fleet-agent."+s))
		if err != nil {
			t.Fatal(err)
		}
		if regexp.MustCompile(`systemctl[^\n]*\b(start|restart|enable|reload-or-restart)\b|deb-systemd-invoke|invoke-rc\.d`).Match(b) {
			t.Fatalf("%s starts or enables the service:\n%s", s, b)
		}
	}
	verify := exec.CommandContext(t.Context(), "systemd-analyze", "verify", "--root="+root, "/usr/lib/systemd/system/fleet-agent.service")
	if out, err := verify.CombinedOutput(); err != nil || len(bytes.TrimSpace(out)) != 0 {
		t.Fatalf("systemd-analyze verify on the installed unit: %v\n%s", err, out)
	}

	// An upgrade keeps the operator's edit of the config.
	edited := []byte("# edited by the operator\n")
	if err := os.WriteFile(filepath.Join(root, "etc/fleet-agent/config.yaml"), edited, 0o640); err != nil {
		t.Fatal(err)
	}
	dpkg(buildTestDeb(t, "v1.1.0", t.TempDir()), "--force-confold")
	got, err := os.ReadFile(filepath.Join(root, "etc/fleet-agent/config.yaml"))
	if err != nil || !bytes.Equal(got, edited) {
		t.Fatalf("the upgrade replaced the edited config: %q %v", got, err)
	}
	status, _ := os.ReadFile(filepath.Join(root, "var/lib/dpkg/status"))
	if !bytes.Contains(status, []byte("Version: 1.1.0")) {
		t.Fatalf("dpkg status after the upgrade:\n%s", status)
	}
}

// DebVersion turns git describe output into versions dpkg orders.
func TestDebVersion(t *testing.T) {
	for in, want := range map[string]string{
		"v1.2.3":                  "1.2.3",
		"v1.2.3-4-gabcdef0":       "1.2.3+4.gabcdef0",
		"v1.2.3-4-gabcdef0-dirty": "1.2.3+4.gabcdef0+dirty",
		"c07803a":                 "0~c07803a",
		"c07803a-dirty":           "0~c07803a+dirty",
		"v1.0.0-rc.1":             "1.0.0~rc.1",
		// An untagged commit whose hash starts with a digit sorts below
		// every release too (found from outside: 71dde1d sorted above 1.0.0).
		"71dde1d":       "0~71dde1d",
		"71dde1d-dirty": "0~71dde1d+dirty",
		"1234567":       "0~1234567",
		"v2":            "2",
	} {
		if got := DebVersion(in); got != want {
			t.Errorf("DebVersion(%q) = %q, want %q", in, got, want)
		}
	}
}
