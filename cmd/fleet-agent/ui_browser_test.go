package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/fleet-agent/fleet-agent/internal/forge/githubemu"
)

// chromiumPath is the browser the page is tested in: Debian's chromium
// package (.ci/run installs it), or FLEET_AGENT_CHROMIUM.
func chromiumPath(t *testing.T) string {
	t.Helper()
	p := os.Getenv("FLEET_AGENT_CHROMIUM")
	if p == "" {
		p = "/usr/bin/chromium"
	}
	if _, err := os.Stat(p); err != nil {
		// A failure, not a skip: a page nobody tested in a browser is not
		// tested at all.
		t.Fatalf("no browser for the page's test: %v (apt-get install chromium, or set FLEET_AGENT_CHROMIUM)", err)
	}
	return p
}

// browser is a headless Chromium driven through the DevTools protocol
// (chromedp) that records every console error, uncaught exception and
// browser log error (a refused resource, a content security policy
// violation): any of them fails the test.
type browser struct {
	t    *testing.T
	ctx  context.Context
	mu   sync.Mutex
	errs []string
}

func newBrowser(t *testing.T) *browser {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromiumPath(t)),
		chromedp.NoSandbox, // root in CI
		chromedp.Headless,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 900),
	)
	actx, cancelA := chromedp.NewExecAllocator(t.Context(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	ctx, cancelT := context.WithTimeout(ctx, 4*time.Minute)
	b := &browser{t: t, ctx: ctx}
	// Console subscribes (and starts the browser) before it returns, so no
	// message of the first page is lost.
	messages := chromedp.Console(ctx)
	var wg sync.WaitGroup
	wg.Go(func() {
		for m, err := range messages {
			if err != nil {
				return
			}
			if m.Type == chromedp.ConsoleError || m.IsException() {
				b.mu.Lock()
				b.errs = append(b.errs, m.String()+" at "+m.URL)
				b.mu.Unlock()
			}
		}
	})
	t.Cleanup(func() {
		// A round trip, then a moment, so that a message the page wrote
		// just before the end is read before the browser goes.
		_, _ = chromedp.Run(ctx, chromedp.Evaluate[int]("1"))
		time.Sleep(200 * time.Millisecond)
		cancelT()
		cancel()
		cancelA()
		wg.Wait()
		for _, e := range b.errs {
			t.Errorf("browser console: %s", e)
		}
	})
	return b
}

func (b *browser) do(steps ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	if err := chromedp.Do(b.ctx, steps...); err != nil {
		b.t.Fatalf("browser: %v", err)
	}
}

func value[T any](b *browser, a chromedp.Action[T]) T {
	b.t.Helper()
	v, err := chromedp.Run(b.ctx, a)
	if err != nil {
		b.t.Fatalf("browser: %v", err)
	}
	return v
}

// text loads url and returns the text of its main element.
func (b *browser) text(url string) string {
	b.t.Helper()
	b.do(chromedp.Navigate(url))
	return value(b, chromedp.Text(chromedp.CSS("main")))
}

// waitText reloads url until its main text holds want; it returns every
// distinct text seen on the way (what changed while waiting).
func (b *browser) waitText(url, want string, limit time.Duration) []string {
	b.t.Helper()
	var seen []string
	deadline := time.Now().Add(limit)
	for {
		s := b.text(url)
		if len(seen) == 0 || seen[len(seen)-1] != s {
			seen = append(seen, s)
		}
		if strings.Contains(s, want) {
			return seen
		}
		if time.Now().After(deadline) {
			b.t.Fatalf("%s never showed %q; it shows:\n%s", url, want, s)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// screenshot writes the whole page as name.png under the test's artifact
// directory (kept with go test -artifacts -outputdir DIR).
func (b *browser) screenshot(name string) {
	b.t.Helper()
	png := value(b, chromedp.FullScreenshot(100))
	path := filepath.Join(b.t.ArtifactDir(), name+".png")
	if err := os.WriteFile(path, png, 0o644); err != nil {
		b.t.Fatal(err)
	}
	b.t.Logf("screenshot %s", path)
}

// k8sDoc is a fleet with a GPU pool and a pool backed by a Kubernetes
// substrate on the fake provider, its cpu flavor at n nodes.
func k8sDoc(n int) string {
	return fmt.Sprintf(`{"version":1,"sites":[{"name":"lab","kind":"shared","region":"local"}],
"providerAccounts":[{"name":"sim","provider":"fake","config":{}}],
"pools":[{"name":"gpu","site":"lab","class":"provider","providerAccount":"sim","gpuModel":"H100","ownerQuota":{"gpu":4}},
{"name":"k8s","site":"lab","class":"metal-host","gpuModel":"H100","policy":{"substrate":{"kind":"kubernetes","account":"sim",
"cluster":{"create":{"location":"fake-east"}},"flavors":[{"name":"cpu","machineType":"fake-cpu-4","nodes":%d}]}}}],
"flavors":[{"pool":"gpu","name":"small","vcpu":4,"memoryGiB":16,"diskGiB":100,"gpus":1}]}`, n)
}

// openPR opens pull request n with doc as its fleet.json, on top of the
// working copy's HEAD, and wakes the agent.
func (r *runningAgent) openPR(t *testing.T, n int, doc string) string {
	t.Helper()
	r.work.Git(t, "checkout", "-q", "-B", fmt.Sprintf("pr%d", n))
	r.work.Write(t, "fleet.json", doc)
	sha := r.work.CommitAll(t, fmt.Sprintf("pull request %d", n))
	r.work.Push(t, "--force", fmt.Sprintf("HEAD:refs/pull/%d/head", n))
	r.gh.AddCommit(sha)
	r.gh.OpenPR(githubemu.PR{Number: n, HeadSHA: sha, HeadRef: fmt.Sprintf("pr%d", n)})
	r.webhook(t)
	return sha
}

// planned waits for the plan comment naming sha on pull request n.
func (r *runningAgent) planned(t *testing.T, n int, sha string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		for _, c := range r.gh.Comments(n) {
			if strings.Contains(c.Body, sha) {
				return
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("the plan comment for %s never came on #%d", sha, n)
}

// TestPageInBrowser drives a running agent (git server, GitHub emulator,
// fake provider) and looks at its page in headless Chromium: the applied
// commit after a merge, the substrate coming up, drift after a break-glass
// edit, an open proposal, the audit filtered to edits; with JavaScript
// off, on a phone, from the keyboard; never a secret, never a console
// error. Screenshots of each page go to the test's artifact directory.
func TestPageInBrowser(t *testing.T) {
	b := newBrowser(t)
	dir := t.TempDir()
	r := startRunningWith(t, "1s", fmt.Sprintf(`drift:
  every: 1s
substrate:
  every: 1s
providers:
  fake:
    statePath: %s
    steps: { cluster: 2, nodePool: 12, update: 1, delete: 1 }
`, filepath.Join(dir, "fake.json")))
	env := map[string]string{}
	page := "http://" + r.ops + "/ui/"

	// Before anything is merged: the empty fleet followed from its tip.
	b.waitText(page, r.boot[:12], 20*time.Second)

	// A pull request, planned, then merged: the overview shows the commit.
	head := r.openPR(t, 1, k8sDoc(2))
	r.planned(t, 1, head)
	r.work.Push(t, "--force", head+":refs/heads/main")
	r.gh.MergePR(1, head)
	r.webhook(t)
	b.waitText(page, head[:12], 30*time.Second)
	b.screenshot("1-overview-applied")

	// The substrate comes up on the fake provider: its node pool goes from
	// nothing to running with 2 nodes. (Nodes joining needs a cluster that
	// runs the node daemon; the fake provider has none, so the page's
	// joined count stays 0 of 0 here.)
	first := b.waitText(page+"substrates", "Pool k8s", 30*time.Second)
	b.screenshot("2-substrates-coming-up")
	seen := b.waitText(page+"substrates", "running\t2", 60*time.Second)
	if strings.Contains(first[len(first)-1], "running\t2") || len(seen) < 2 {
		t.Errorf("the substrates page never changed while the substrate came up: %q then %q", first, seen)
	}
	b.screenshot("3-substrates-running")

	// A break-glass edit: the next drift check shows it on the overview,
	// which is left open: its script refreshes it in place (every 10 s).
	b.do(chromedp.Navigate(page))
	value(b, chromedp.Evaluate[bool]("window.notReloaded = true"))
	if _, errs, code := cli(t, env, "edit", "flavor", "gpu/small", "vcpu=8", "--config", r.path); code != 0 {
		t.Fatalf("edit: %s", errs)
	}
	var s string
	for deadline := time.Now().Add(30 * time.Second); !strings.Contains(s, "has drifted"); time.Sleep(250 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the open overview never showed the drift:\n%s", s)
		}
		s = value(b, chromedp.Text(chromedp.CSS("main")))
	}
	if !value(b, chromedp.Evaluate[bool]("window.notReloaded === true")) {
		t.Error("the overview was reloaded rather than refreshed in place")
	}
	if !strings.Contains(s, "flavor\t1") || !strings.Contains(s, "~ flavor gpu/small (vcpu)") {
		t.Errorf("the drift is not shown by kind with its change:\n%s", s)
	}
	b.screenshot("4-overview-drift")

	// An open proposal: its plan lines and hash.
	head2 := r.openPR(t, 2, k8sDoc(3))
	r.planned(t, 2, head2)
	props := b.waitText(page+"proposals", "Pull request #2", 30*time.Second)
	if s := props[len(props)-1]; !strings.Contains(s, "~ pool k8s") || !strings.Contains(s, "Plan hash") {
		t.Errorf("the proposal's plan is not shown:\n%s", s)
	}
	b.screenshot("5-proposals")

	// The audit, filtered to the break-glass edits.
	audit := b.text(page + "audit?kind=edit")
	if !strings.Contains(audit, "flavor.update") || strings.Contains(audit, "\tapply\t") {
		t.Errorf("the audit filtered to edits:\n%s", audit)
	}
	b.screenshot("6-audit-edits")

	// Nothing secret on any page: the GitHub token, the git password and
	// the webhook secret of this agent.
	for _, p := range []string{"", "proposals", "substrates", "audit"} {
		b.text(page + p)
		h := value(b, chromedp.OuterHTML(chromedp.CSS("html")))
		for _, secret := range []string{canaryToken, r.srv.Password, hookSecret} {
			if strings.Contains(h, secret) {
				t.Errorf("/ui/%s shows a secret", p)
			}
		}
	}

	// The keyboard: the first Tab reaches the skip link, Enter follows it.
	b.do(chromedp.Navigate(page), chromedp.KeyEvent(kb.Tab))
	if focused := value(b, chromedp.Evaluate[string](`document.activeElement.textContent`)); focused != "Skip to content" {
		t.Errorf("the first Tab focuses %q, want the skip link", focused)
	}

	// On a phone: nothing wider than the screen.
	b.do(chromedp.EmulateViewport(390, 844, chromedp.EmulateMobile), chromedp.Navigate(page))
	if value(b, chromedp.Evaluate[bool](`document.documentElement.scrollWidth > window.innerWidth`)) {
		t.Error("the overview is wider than a phone's screen")
	}
	b.screenshot("7-overview-phone")
	b.do(chromedp.ResetViewport())

	// JavaScript off: the page is whole without its script.
	if _, err := chromedp.Call(b.ctx, emulation.SetScriptExecutionDisabled, emulation.SetScriptExecutionDisabledParams{Value: true}); err != nil {
		t.Fatal(err)
	}
	if s := b.text(page); !strings.Contains(s, head[:12]) || !strings.Contains(s, "has drifted") {
		t.Errorf("with JavaScript off the overview lacks the applied commit or the drift:\n%s", s)
	}
}
