package gkeemu_test

import (
	"errors"
	"testing"
	"time"

	"golang.org/x/oauth2/google"
	compute "google.golang.org/api/compute/v1"
	container "google.golang.org/api/container/v1"
	"google.golang.org/api/googleapi"
	"google.golang.org/api/option"

	"github.com/fleet-agent/fleet-agent/internal/clock"
	"github.com/fleet-agent/fleet-agent/internal/providers/gcp/gkeemu"
	"github.com/fleet-agent/fleet-agent/internal/providers/gcp/gkeemu/wirecheck"
)

const (
	project = "fa-emu-project"
	saEmail = "fleet-agent@fa-emu-project.iam.gserviceaccount.com"
	region  = "us-central1"
)

var epoch = time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)

// env is an emulator and the real SDK's clients pointed at it, with a
// service account key's token source as their credentials.
type env struct {
	emu *gkeemu.Emulator
	clk *clock.Fake
	key []byte
	ctr *container.Service
	cmp *compute.Service
}

// start serves an emulator for the test; every answer it gave is checked
// against the discovery documents when the test ends.
func start(t *testing.T, mutate func(*gkeemu.Options)) *env {
	t.Helper()
	clk := clock.NewFake(epoch)
	opts := gkeemu.DefaultOptions()
	opts.Clock = clk
	if mutate != nil {
		mutate(&opts)
	}
	emu, err := gkeemu.Start(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(emu.Close)
	wirecheck.Register(t, emu)
	key, err := emu.AddServiceAccount(saEmail, project)
	if err != nil {
		t.Fatal(err)
	}
	return &env{emu: emu, clk: clk, key: key, ctr: containerFor(t, emu, key), cmp: computeFor(t, emu, key)}
}

func containerFor(t *testing.T, emu *gkeemu.Emulator, key []byte) *container.Service {
	t.Helper()
	conf, err := google.JWTConfigFromJSON(key, container.CloudPlatformScope)
	if err != nil {
		t.Fatal(err)
	}
	svc, err := container.NewService(t.Context(), option.WithEndpoint(emu.ContainerEndpoint()), option.WithHTTPClient(conf.Client(t.Context())))
	if err != nil {
		t.Fatal(err)
	}
	return svc
}

func computeFor(t *testing.T, emu *gkeemu.Emulator, key []byte) *compute.Service {
	t.Helper()
	conf, err := google.JWTConfigFromJSON(key, compute.CloudPlatformScope)
	if err != nil {
		t.Fatal(err)
	}
	svc, err := compute.NewService(t.Context(), option.WithEndpoint(emu.ComputeEndpoint()), option.WithHTTPClient(conf.Client(t.Context())))
	if err != nil {
		t.Fatal(err)
	}
	return svc
}

func parent(loc string) string { return "projects/" + project + "/locations/" + loc }

func clusterName(loc, name string) string { return parent(loc) + "/clusters/" + name }

// gerr returns the *googleapi.Error in err, failing the test without one.
func gerr(t *testing.T, err error) *googleapi.Error {
	t.Helper()
	var g *googleapi.Error
	if !errors.As(err, &g) {
		t.Fatalf("want a *googleapi.Error, got %T %v", err, err)
	}
	return g
}

// wait polls an operation until DONE, failing after n polls.
func (v *env) wait(t *testing.T, loc string, op *container.Operation, n int) *container.Operation {
	t.Helper()
	for range n {
		if op.Status == "DONE" {
			return op
		}
		var err error
		op, err = v.ctr.Projects.Locations.Operations.Get(parent(loc) + "/operations/" + op.Name).Context(t.Context()).Do()
		if err != nil {
			t.Fatalf("operations.get: %v", err)
		}
	}
	t.Fatalf("operation %s not DONE after %d polls: %+v", op.Name, n, op)
	return nil
}

// cpuCluster is a create request for a zonal cluster with one CPU pool.
func cpuCluster(name string, nodes int64) *container.CreateClusterRequest {
	return &container.CreateClusterRequest{Cluster: &container.Cluster{
		Name:           name,
		ResourceLabels: map[string]string{"fleet-agent-dev_substrate-pool": "pool_x"},
		NodePools: []*container.NodePool{{
			Name: "system", InitialNodeCount: nodes, ForceSendFields: []string{"InitialNodeCount"},
			Config: &container.NodeConfig{MachineType: "e2-standard-2"},
		}},
	}}
}

// runningCluster creates a zonal cluster and waits for it.
func (v *env) runningCluster(t *testing.T, zone, name string) *container.Cluster {
	t.Helper()
	op, err := v.ctr.Projects.Locations.Clusters.Create(parent(zone), cpuCluster(name, 1)).Context(t.Context()).Do()
	if err != nil {
		t.Fatalf("clusters.create: %v", err)
	}
	v.wait(t, zone, op, 10)
	c, err := v.ctr.Projects.Locations.Clusters.Get(clusterName(zone, name)).Context(t.Context()).Do()
	if err != nil || c.Status != "RUNNING" {
		t.Fatalf("clusters.get: %+v %v", c, err)
	}
	return c
}
