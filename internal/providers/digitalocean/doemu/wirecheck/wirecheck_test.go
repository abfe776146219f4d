package wirecheck_test

import (
	"bytes"
	"context"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/digitalocean/godo"
	"golang.org/x/oauth2"

	"github.com/fleet-agent/fleet-agent/internal/providers/digitalocean/doemu"
	"github.com/fleet-agent/fleet-agent/internal/providers/digitalocean/doemu/wirecheck"
)

// TestCheckerCatchesDrift shows the check can fail: real exchanges pass,
// and each one altered the way an emulator or a client could drift is
// caught with the reason.
func TestCheckerCatchesDrift(t *testing.T) {
	c, err := wirecheck.Load()
	if err != nil {
		t.Fatal(err)
	}
	emu := doemu.New(doemu.Options{Accounts: []doemu.Account{{Token: "tok", Team: "t", Email: "a@example.com"}}})
	srv := httptest.NewServer(emu)
	defer srv.Close()
	do, err := godo.New(oauth2.NewClient(context.Background(), oauth2.StaticTokenSource(&oauth2.Token{AccessToken: "tok"})), godo.SetBaseURL(srv.URL+"/"))
	if err != nil {
		t.Fatal(err)
	}
	created, _, err := do.Kubernetes.Create(t.Context(), &godo.KubernetesClusterCreateRequest{
		Name: "fa-wire", RegionSlug: "tor1", VersionSlug: "latest",
		NodePools: []*godo.KubernetesNodePoolCreateRequest{{Name: "default", Size: "s-1vcpu-2gb", Count: 1}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := do.Kubernetes.Get(t.Context(), created.ID); err != nil {
		t.Fatal(err)
	}
	x := emu.Exchanges()
	create, get := x[0], x[1]
	for _, ex := range []doemu.Exchange{create, get} {
		if errs := c.Check(ex); len(errs) > 0 {
			t.Fatalf("a true exchange fails: %v", errs)
		}
	}
	edit := func(x doemu.Exchange, resp bool, from, to string) doemu.Exchange {
		t.Helper()
		b := &x.Body
		if resp {
			b = &x.RespBody
		}
		if !bytes.Contains(*b, []byte(from)) {
			t.Fatalf("%q not in %s", from, *b)
		}
		*b = bytes.Replace(bytes.Clone(*b), []byte(from), []byte(to), 1)
		return x
	}
	drifts := []struct {
		name string
		x    doemu.Exchange
		want string
	}{
		{"a state the service has not", edit(get, true, `"state":"provisioning"`, `"state":"booting"`), "state"},
		{"a field the service has not", edit(get, true, `"auto_upgrade":false`, `"auto_upgrade":false,"node_pool_id":"x"`), "/kubernetes_cluster/node_pool_id is not declared"},
		{"a number as a string", edit(get, true, `"count":1`, `"count":"1"`), "count"},
		{"a required field missing", edit(get, true, `"size":"s-1vcpu-2gb",`, ``), "size"},
		{"a request without its version", edit(create, false, `"version":"latest",`, ``), "version"},
		{"a request with a misspelt field", edit(create, false, `"region":"tor1"`, `"region":"tor1","regoin":"tor1"`), "/regoin is not declared"},
		{"a status the route does not answer", func() doemu.Exchange { y := get; y.Status = 201; return y }(), "201"},
		{"a missing rate limit header", func() doemu.Exchange {
			y := get
			y.RespHeader = y.RespHeader.Clone()
			y.RespHeader.Del("RateLimit-Reset")
			return y
		}(), "ratelimit-reset"},
	}
	for _, d := range drifts {
		errs := c.Check(d.x)
		if len(errs) == 0 {
			t.Errorf("%s: not caught", d.name)
			continue
		}
		var all strings.Builder
		for _, e := range errs {
			all.WriteString(e.Error())
		}
		if !strings.Contains(all.String(), d.want) {
			t.Errorf("%s: caught, but not for %q: %s", d.name, d.want, all.String())
		}
	}
}
