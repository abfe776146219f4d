package digitalocean_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/fleet-agent/fleet-agent/internal/providers"
	"github.com/fleet-agent/fleet-agent/internal/providers/digitalocean/doemu"
)

// TestCanary: the API token (a canary value behind a secret reference) and
// a minted cluster token never appear in what the adapter returns, in its
// errors (of every kind the emulator can give), or in any request but the
// Authorization header; the credential is the only place its token is, and
// it neither prints nor marshals it. The adapter does not log.
func TestCanary(t *testing.T) {
	w := newWorld(t, doemu.Options{RatePerMinute: 1000}, "")
	ctx := t.Context()
	var seen []any
	var errs []error
	keep := func(v any, err error) {
		seen = append(seen, v)
		if err != nil {
			errs = append(errs, err)
		}
	}
	c := w.ready(t, "fa-canary")
	cred, err := w.ad.Credentials(ctx, acct, c.Ref)
	if err != nil {
		t.Fatal(err)
	}
	minted := cred.Token

	keep(nil, w.ad.Verify(ctx, acct))
	keep(w.ad.Locations(ctx, acct))
	keep(w.ad.MachineType(ctx, acct, "tor1", "gpu-h100x8-640gb"))
	keep(w.ad.Rules(ctx, acct))
	keep(w.ad.GetCluster(ctx, acct, c.Ref))
	keep(w.ad.ListClusters(ctx, acct, providers.LabelSubstratePool))
	keep(w.ad.EnsureNodePool(ctx, acct, c.Ref, cpuPool("fa-canary-cpu")))
	keep(w.ad.ListNodePools(ctx, acct, c.Ref))
	// Failures of every kind.
	keep(nil, w.ad.Verify(ctx, account("bad", map[string]any{"token": "secret://ops/do-revoked"})))
	keep(nil, w.ad.Verify(ctx, account("pasted", map[string]any{"token": apiToken})))
	keep(nil, w.ad.Verify(ctx, account("missing", map[string]any{"token": "secret://ops/none"})))
	for _, f := range []doemu.Fault{
		{Route: "GET /v2/kubernetes/clusters/{cluster_id}/credentials", Status: 500},
		{Route: "GET /v2/kubernetes/clusters/{cluster_id}/credentials", Status: 429},
		{Route: "GET /v2/kubernetes/clusters/{cluster_id}/credentials", Drop: true, Times: 2},
		{Route: "GET /v2/kubernetes/clusters/{cluster_id}/credentials", Status: 404},
	} {
		w.emu.Inject(f)
		keep(w.ad.Credentials(ctx, acct, c.Ref))
	}
	keep(w.ad.EnsureNodePool(ctx, acct, c.Ref, gpuPool("FA_not-a-dns-label")))
	w.emu.Stockout("gpu-h100x8-640gb", "tor1", true)
	keep(w.ad.EnsureNodePool(ctx, acct, c.Ref, gpuPool("fa-canary-gpu")))
	keep(w.ad.DeleteCluster(ctx, acct, c.Ref))
	keep(w.ad.Credentials(ctx, acct, providers.ClusterRef{ID: "4f1c2b7e-0000-4000-8000-00000000dead"}))

	if len(errs) < 10 {
		t.Fatalf("only %d failures: the canary saw too little", len(errs))
	}
	secrets := map[string]string{"the API token": apiToken, "the minted token": minted}
	for what, v := range secrets {
		for _, err := range errs {
			if strings.Contains(err.Error(), v) || strings.Contains(fmt.Sprintf("%+v %#v", err, err), v) {
				t.Errorf("an error holds %s: %v", what, err)
			}
		}
		for _, s := range seen {
			b, _ := json.Marshal(s)
			if strings.Contains(string(b), v) || strings.Contains(fmt.Sprintf("%+v", s), v) {
				t.Errorf("a result holds %s: %s", what, b)
			}
		}
		for _, x := range w.emu.Exchanges() {
			req := x.Method + " " + x.Path + "?" + x.RawQuery + " " + string(x.Body)
			if strings.Contains(req, v) {
				t.Errorf("a request carries %s outside its Authorization header: %s", what, req)
			}
		}
		if strings.Contains(cred.String(), v) || strings.Contains(fmt.Sprintf("%v %+v %#v", cred, cred, cred), v) {
			t.Errorf("the credential prints %s", what)
		}
	}
	if _, err := json.Marshal(cred); err == nil {
		t.Error("the credential marshals")
	}
	if !strings.Contains(w.emu.Exchanges()[0].Header.Get("Authorization"), apiToken) {
		t.Error("the token never reached DigitalOcean: the canary proves nothing")
	}
}
