package main

import (
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fleet-agent/fleet-agent/internal/providers/digitalocean/doemu"
)

// doksWorld is the DigitalOcean emulator behind a real server, a secrets
// directory holding the reference document's token where its reference
// (secret://root/do-api-token) points, and a config naming both.
type doksWorld struct {
	emu    *doemu.Emulator
	dir    string
	config string
	state  string
}

const doksToken = "dop_v1_CANARYe2e00112233445566778899aabbccddeeff"

func newDOKSWorld(t *testing.T) *doksWorld {
	t.Helper()
	emu := doemu.New(doemu.Options{Accounts: []doemu.Account{{Token: doksToken, Team: "team-a", Email: "ops@example.com"}}})
	srv := httptest.NewServer(emu)
	t.Cleanup(srv.Close)
	dir := t.TempDir()
	secrets := filepath.Join(dir, "secrets")
	if err := os.MkdirAll(filepath.Join(secrets, "root"), 0o700); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(secrets, "root"), "do-api-token", doksToken+"\n")
	w := &doksWorld{emu: emu, dir: dir, state: filepath.Join(dir, "fleet.db")}
	w.config = writeFile(t, dir, "config.yaml", "state: "+w.state+"\nsecrets:\n  dir: "+secrets+"\nproviders:\n  digitalocean:\n    apiURL: "+srv.URL+"/\n")
	return w
}

// The reference's DOKS document is checked live: no `not checked live`, the
// GPU size's accelerators match, and it applies. A flavor with zones or a
// disk size is blocked with its reason. The token never shows.
func TestReferenceDOKSDocumentPlansLive(t *testing.T) {
	w := newDOKSWorld(t)
	env := map[string]string{}
	doc := valid + "kubernetes-pool-doks.json"
	out, errs, code := cli(t, env, "plan", doc, "--config", w.config)
	if code != 0 || strings.Contains(out, "not checked live") || !strings.Contains(out, "+ pool gpu-fleet") {
		t.Fatalf("plan of the reference DOKS document: %d\n%s\n%s", code, out, errs)
	}
	if n := w.emu.Count("GET /v2/account"); n == 0 {
		t.Fatalf("the account was not verified at the emulator (%d requests)", n)
	}
	if out, errs, code := cli(t, env, "apply", doc, "--config", w.config, "--yes"); code != 0 || !strings.Contains(out, "Applied") {
		t.Fatalf("apply: %d\n%s\n%s", code, out, errs)
	}
	data, err := os.ReadFile(doc)
	if err != nil {
		t.Fatal(err)
	}
	for name, edit := range map[string][2]string{
		"zones":   {`"nodes": 2,`, `"nodes": 2, "zones": ["tor1-a"],`},
		"diskGiB": {`"nodes": 2,`, `"nodes": 2, "diskGiB": 200,`},
		"gpus":    {`"count": 8`, `"count": 4`},
	} {
		bad := writeFile(t, w.dir, name+".json", strings.Replace(string(data), edit[0], edit[1], 1))
		out, errs, code := cli(t, env, "plan", bad, "--config", w.config)
		t.Logf("%s: %s", name, out)
		if code != 1 || !strings.Contains(errs, "PLAN_BLOCKED") || !strings.Contains(out, "! pool gpu-fleet") {
			t.Errorf("a flavor with %s on DOKS: %d\n%s\n%s", name, code, out, errs)
		}
		if strings.Contains(out+errs, doksToken) {
			t.Fatal("the DigitalOcean token reached the output")
		}
	}
}
