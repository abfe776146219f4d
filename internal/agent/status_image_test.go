package agent

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/fleet-agent/fleet-agent/internal/imagepin"
	"github.com/fleet-agent/fleet-agent/internal/state/statetest"
)

// Status carries the node daemon's image as the agent last pinned it, and
// leaves the key out until there is one.
func TestStatusShowsTheNodeDaemonImage(t *testing.T) {
	st := statetest.Open(t)
	v, err := Status(st, "acme")
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := json.Marshal(v); v.NodeDaemonImage != nil || strings.Contains(string(b), "nodeDaemonImage") {
		t.Fatalf("an image before any was pinned: %s", b)
	}
	pin := imagepin.Pin{Ref: "r.example/a/b:v1", Image: "r.example/a/b:v1", Reason: imagepin.ReasonUnreachable,
		Detail: "the registry r.example cannot be reached", At: 1}
	if err := (imagepin.StoreRecords{Store: st}).RecordPin(t.Context(), pin); err != nil {
		t.Fatal(err)
	}
	v, err = Status(st, "acme")
	if err != nil {
		t.Fatal(err)
	}
	if v.NodeDaemonImage == nil || *v.NodeDaemonImage != pin {
		t.Fatalf("status image %+v, want %+v", v.NodeDaemonImage, pin)
	}
	b, _ := json.Marshal(v)
	if !strings.Contains(string(b), `"nodeDaemonImage":{"ref":"r.example/a/b:v1","image":"r.example/a/b:v1","pinned":false,"reason":"registryUnreachable"`) {
		t.Fatalf("json: %s", b)
	}
}
