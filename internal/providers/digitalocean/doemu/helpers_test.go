package doemu_test

import (
	"context"
	"errors"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/digitalocean/godo"
	"golang.org/x/oauth2"

	"github.com/fleet-agent/fleet-agent/internal/clock"
	"github.com/fleet-agent/fleet-agent/internal/providers/digitalocean/doemu"
	"github.com/fleet-agent/fleet-agent/internal/providers/digitalocean/doemu/wirecheck"
)

var epoch = time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)

const (
	token      = "dop_v1_emulatortesttoken"
	otherToken = "dop_v1_sameteamothertoken"
	roToken    = "dop_v1_readonlytoken"
)

var accounts = []doemu.Account{
	{Token: token, Team: "team-a", Email: "ops@example.com", DropletLimit: 40},
	{Token: otherToken, Team: "team-a", Email: "ci@example.com"},
	{Token: roToken, Team: "team-a", Email: "viewer@example.com", ReadOnly: true},
	{Token: "dop_v1_teamb", Team: "team-b", Email: "b@example.com"},
}

// world is an emulator behind a real HTTP server, its clock, and a godo
// client built the way the adapter builds one.
type world struct {
	emu *doemu.Emulator
	srv *httptest.Server
	clk *clock.Fake
	do  *godo.Client
	// bad are exchanges sent against the description on purpose: only
	// their answers are held to it.
	bad map[int]bool
}

// badRequests runs f, whose requests break the description on purpose.
func (w *world) badRequests(f func()) {
	from := w.emu.Mark()
	f()
	for i := from; i < w.emu.Mark(); i++ {
		w.bad[i] = true
	}
}

type wireMode int

const (
	wireAll wireMode = iota
	// answersOnly: the test sends what the description does not take on
	// purpose (or godo does: its taints), so only the answers are held to it.
	answersOnly
)

func newWorld(t *testing.T, opts doemu.Options, mode wireMode) *world {
	t.Helper()
	clk := clock.NewFake(epoch)
	if opts.Clock == nil {
		opts.Clock = clk
	}
	if opts.Accounts == nil {
		opts.Accounts = accounts
	}
	emu := doemu.New(opts)
	srv := httptest.NewServer(emu)
	t.Cleanup(srv.Close)
	w := &world{emu: emu, srv: srv, clk: clk, do: client(t, srv.URL, token), bad: map[int]bool{}}
	t.Cleanup(func() { checkWire(t, emu, mode, w.bad) })
	return w
}

// client is godo over an oauth2 static token source, retries off (godo.New
// without a retry config), pointed at the emulator.
func client(t *testing.T, base, tok string) *godo.Client {
	t.Helper()
	hc := oauth2.NewClient(context.Background(), oauth2.StaticTokenSource(&oauth2.Token{AccessToken: tok}))
	c, err := godo.New(hc, godo.SetBaseURL(base+"/"))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// checkWire holds every exchange of the test against DigitalOcean's
// OpenAPI description.
func checkWire(t *testing.T, emu *doemu.Emulator, mode wireMode, bad map[int]bool) {
	t.Helper()
	checker, err := wirecheck.Shared()
	if err != nil {
		t.Fatal(err)
	}
	for i, x := range emu.Exchanges() {
		for _, err := range checker.Check(x) {
			if (mode == answersOnly || bad[i]) && !isAnswer(err) {
				continue
			}
			t.Errorf("wire: %v", err)
		}
	}
}

func isAnswer(err error) bool { return strings.Contains(err.Error(), ": answer ") }

// status is the HTTP status of a godo error, or 0.
func status(err error) int {
	var er *godo.ErrorResponse
	if errors.As(err, &er) && er.Response != nil {
		return er.Response.StatusCode
	}
	return 0
}

func basicCreate(name string) *godo.KubernetesClusterCreateRequest {
	off := false
	return &godo.KubernetesClusterCreateRequest{
		Name: name, RegionSlug: "tor1", VersionSlug: "1.34",
		NodePools:             []*godo.KubernetesNodePoolCreateRequest{{Name: "default", Size: "s-2vcpu-4gb", Count: 1}},
		NvidiaGpuDevicePlugin: &godo.KubernetesNvidiaGpuDevicePlugin{Enabled: &off},
		AmdGpuDevicePlugin:    &godo.KubernetesAmdGpuDevicePlugin{Enabled: &off},
	}
}

// running creates a cluster and reads it until it runs.
func (w *world) running(t *testing.T, name string) *godo.KubernetesCluster {
	t.Helper()
	c, _, err := w.do.Kubernetes.Create(t.Context(), basicCreate(name))
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	for range 20 {
		got, _, err := w.do.Kubernetes.Get(t.Context(), c.ID)
		if err != nil {
			t.Fatalf("Get: %v", err)
		}
		if got.Status.State == godo.KubernetesClusterStatusRunning {
			return got
		}
	}
	t.Fatalf("cluster %s not running after 20 reads", name)
	return nil
}

func asErr(err error, target **godo.ErrorResponse) bool { return errors.As(err, target) }
