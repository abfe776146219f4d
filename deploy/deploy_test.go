// Package deploy holds the files of an ops box (the systemd unit and an
// example config) and the tests that keep them loadable.
package deploy

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/fleet-agent/fleet-agent/internal/config"
)

func TestExampleConfigParses(t *testing.T) {
	data, err := os.ReadFile("config.example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	env := func(k string) (string, bool) { return "", false }
	cfg, err := config.Parse("config.example.yaml", data, env)
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.CheckForRun(); err != nil {
		// secret://NAME needs a secrets directory; the unit provides one
		// through LoadCredential=, so give the check one as systemd would.
		env = func(k string) (string, bool) {
			if k == "CREDENTIALS_DIRECTORY" {
				return "/run/credentials/fleet-agent.service", true
			}
			return "", false
		}
		cfg, err = config.Parse("config.example.yaml", data, env)
		if err != nil {
			t.Fatal(err)
		}
		if err := cfg.CheckForRun(); err != nil {
			t.Fatal(err)
		}
	}
	if cfg.GitHub == nil || cfg.Git.URL == "" || cfg.SocketGroup != "fleet-agent" {
		t.Fatalf("unexpected example: %+v", cfg)
	}
}

// unitForCheck copies the unit with ExecStart pointing at an executable
// that exists here (verify checks the binary is there).
func unitForCheck(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("systemd", "fleet-agent.service"))
	if err != nil {
		t.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	unit := strings.ReplaceAll(string(data), "/usr/local/bin/fleet-agent", self)
	path := filepath.Join(t.TempDir(), "fleet-agent.service")
	if err := os.WriteFile(path, []byte(unit), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func systemdAnalyze(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Fatal("systemd-analyze is not installed: install systemd (.ci/run does)")
	}
	return p
}

// TestUnitVerifies fails on any output of systemd-analyze verify: unknown
// keys and bad values only warn (exit 0), so stderr is the signal.
func TestUnitVerifies(t *testing.T) {
	sa := systemdAnalyze(t)
	var stderr bytes.Buffer
	cmd := exec.CommandContext(t.Context(), sa, "verify", unitForCheck(t))
	cmd.Stderr = &stderr
	cmd.Stdout = &stderr
	if err := cmd.Run(); err != nil || stderr.Len() > 0 {
		t.Fatalf("systemd-analyze verify: %v\n%s", err, stderr.String())
	}
}

var exposure = regexp.MustCompile(`Overall exposure level for fleet-agent.service: ([0-9.]+)`)

// TestUnitExposure keeps systemd's exposure score at most 2.0.
func TestUnitExposure(t *testing.T) {
	sa := systemdAnalyze(t)
	out, err := exec.CommandContext(t.Context(), sa, "security", "--offline=true", unitForCheck(t)).CombinedOutput()
	m := exposure.FindSubmatch(out)
	if m == nil {
		t.Fatalf("no exposure score (%v):\n%s", err, out)
	}
	score, _ := strconv.ParseFloat(string(m[1]), 64)
	t.Logf("systemd-analyze security exposure: %.1f", score)
	if score > 2.0 {
		t.Fatalf("exposure %.1f is over 2.0:\n%s", score, out)
	}
}

// TestUnitIPRulesMeanSomething: IPAddressAllow= only narrows an
// IPAddressDeny=; alone it restricts nothing and reads as if it did.
func TestUnitIPRulesMeanSomething(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("systemd", "fleet-agent.service"))
	if err != nil {
		t.Fatal(err)
	}
	unit := "\n" + string(data)
	if strings.Contains(unit, "\nIPAddressAllow=") && !strings.Contains(unit, "\nIPAddressDeny=") {
		t.Fatal("IPAddressAllow= without IPAddressDeny= does nothing: remove it or add the deny list it narrows")
	}
}
