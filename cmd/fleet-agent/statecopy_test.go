package main

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/fleet-agent/fleet-agent/internal/state/statetest"
)

// A fleet applied to a file moves to etcd and back with its installation,
// and reads the same at each place; a copy into a store in use is refused.
func TestStateCopyBetweenBackends(t *testing.T) {
	dir := t.TempDir()
	env := map[string]string{}
	src := filepath.Join(dir, "fleet.db")
	doc := valid + "fleet-config.json"
	out, _, code := cli(t, env, "apply", doc, "--state", src)
	hash := strings.TrimSpace(out[strings.LastIndex(out, "--plan-hash ")+len("--plan-hash "):])
	if _, errs, code2 := cli(t, env, "apply", doc, "--state", src, "--plan-hash", hash); code != 0 || code2 != 0 {
		t.Fatalf("apply: %d %d %s", code, code2, errs)
	}
	want, _, _ := cli(t, env, "export", "--state", src)
	status, _, _ := cli(t, env, "status", "-o", "json", "--state", src)

	etcd := "etcd:" + statetest.EtcdEndpoint(t) + "/copy-test/" + filepath.Base(dir)
	out, errs, code := cli(t, env, "state", "copy", "--from", "bbolt:"+src, "--to", etcd)
	if code != 0 || !strings.Contains(out, "copied ") {
		t.Fatalf("copy to etcd: %d %s %s", code, out, errs)
	}
	if _, errs, code := cli(t, env, "state", "copy", "--from", "bbolt:"+src, "--to", etcd); code != 1 || !strings.Contains(errs, "already holds a store") {
		t.Fatalf("a second copy into the same prefix: %d %s", code, errs)
	}
	back := filepath.Join(dir, "back.db")
	if _, errs, code := cli(t, env, "state", "copy", "--from", etcd, "--to", "bbolt:"+back); code != 0 {
		t.Fatalf("copy back: %d %s", code, errs)
	}
	got, _, _ := cli(t, env, "export", "--state", back)
	if got != want || want == "" {
		t.Fatalf("the fleet after bbolt -> etcd -> bbolt:\n%s\nwant\n%s", got, want)
	}
	again, _, _ := cli(t, env, "status", "-o", "json", "--state", back)
	if inst := between(status, `"installation": "`, `"`); inst == "" || !strings.Contains(again, inst) {
		t.Fatalf("the installation did not travel: %s vs %s", status, again)
	}
	for _, bad := range []string{"bbolt:", "etcd:http://127.0.0.1:1", "nfs:/x", "bbolt:" + back} {
		if _, errs, code := cli(t, env, "state", "copy", "--from", "bbolt:"+src, "--to", bad); code == 0 || !strings.Contains(errs, "INVALID_INPUT") {
			t.Errorf("--to %s: %d %s", bad, code, errs)
		}
	}
}

func between(s, a, b string) string {
	_, rest, ok := strings.Cut(s, a)
	if !ok {
		return ""
	}
	v, _, _ := strings.Cut(rest, b)
	return v
}
