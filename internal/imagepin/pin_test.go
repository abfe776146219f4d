package imagepin_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/rs/zerolog"

	"github.com/fleet-agent/fleet-agent/internal/clock"
	"github.com/fleet-agent/fleet-agent/internal/imagepin"
	"github.com/fleet-agent/fleet-agent/internal/imageref"
	"github.com/fleet-agent/fleet-agent/internal/state"
	"github.com/fleet-agent/fleet-agent/internal/state/statetest"
)

// pushTo puts a new random index at ref and returns its digest reference.
func pushTo(t *testing.T, ref string) string {
	t.Helper()
	idx, err := random.Index(256, 1, 1)
	if err != nil {
		t.Fatal(err)
	}
	tag, err := name.NewTag(ref)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.WriteIndex(tag, idx, remote.WithContext(t.Context())); err != nil {
		t.Fatal(err)
	}
	d, _ := idx.Digest()
	return ref + "@" + d.String()
}

func recorded(t *testing.T, st *state.Store) *imagepin.Pin {
	t.Helper()
	var p *imagepin.Pin
	if err := st.View(func(tx *state.Tx) (err error) { p, err = imagepin.Read(tx); return }); err != nil {
		t.Fatal(err)
	}
	return p
}

// The life of a pin over a real registry and a real store: pinned at the
// first ask and kept from memory while the tag moves; a restart (a new
// Pinner on the same store) follows the move and says so; a restart while
// the registry is down keeps the recorded digest, asks again only after
// RetryAfter, and logs the failure once.
func TestPinFollowsTheRegistryAcrossRestarts(t *testing.T) {
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	host := strings.TrimPrefix(srv.URL, "http://")
	ref := host + "/team/fleet-agent:v1"
	first := pushTo(t, ref)
	st := statetest.Open(t)
	clk := clock.NewFake(time.Unix(1_800_000_000, 0))
	var logs bytes.Buffer
	start := func() *imagepin.Pinner {
		return &imagepin.Pinner{Ref: ref, Resolve: imageref.Resolver{Timeout: 5 * time.Second}.Resolve,
			Records: imagepin.StoreRecords{Store: st}, Clock: clk, Log: zerolog.New(&logs)}
	}
	ctx := t.Context()

	p := start()
	if got := p.Image(ctx); !got.Pinned || got.Image != first || got.Source != "registry" {
		t.Fatalf("first ask: %+v, want %s", got, first)
	}
	if r := recorded(t, st); r == nil || r.Image != first {
		t.Fatalf("recorded %+v", r)
	}
	second := pushTo(t, ref)
	if got := p.Image(ctx); got.Image != first {
		t.Fatalf("the running agent moved to %s without a restart", got.Image)
	}

	p = start() // a restart
	if got := p.Image(ctx); got.Image != second {
		t.Fatalf("after a restart: %s, want the moved tag's %s", got.Image, second)
	}
	if !strings.Contains(logs.String(), "tag moved to a new digest") || !strings.Contains(logs.String(), first) {
		t.Fatalf("the move was not logged with the old digest:\n%s", logs.String())
	}

	srv.Close()
	logs.Reset()
	p = start() // a restart with the registry gone
	got := p.Image(ctx)
	if got.Image != second || !got.Pinned || got.Source != "record" || got.Reason != imagepin.ReasonUnreachable {
		t.Fatalf("registry down after a restart: %+v, want the recorded %s", got, second)
	}
	p.Image(ctx)
	clk.Advance(imagepin.RetryAfter)
	p.Image(ctx)
	if n := strings.Count(logs.String(), "keeps the digest recorded"); n != 1 {
		t.Fatalf("the failure was logged %d times, want once:\n%s", n, logs.String())
	}
	if r := recorded(t, st); r == nil || r.Image != second || !r.Pinned {
		t.Fatalf("the failure overwrote the recorded pin: %+v", r)
	}
}

// With no record, an unreachable registry leaves the tag as configured
// with the reason; asked again only once RetryAfter has passed, and then it
// pins.
func TestPinUnreachableKeepsTheTagThenRetries(t *testing.T) {
	// An address nothing listens at, until the registry starts there.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	host := ln.Addr().String()
	ln.Close()
	ref := host + "/team/fleet-agent:v1"
	st := statetest.Open(t)
	clk := clock.NewFake(time.Unix(1_800_000_000, 0))
	var logs bytes.Buffer
	p := &imagepin.Pinner{Ref: ref, Resolve: imageref.Resolver{Timeout: 5 * time.Second}.Resolve,
		Records: imagepin.StoreRecords{Store: st}, Clock: clk, Log: zerolog.New(&logs)}
	ctx := t.Context()

	got := p.Image(ctx)
	if got.Pinned || got.Image != ref || got.Reason != imagepin.ReasonUnreachable || !strings.Contains(got.Detail, "cannot be reached") {
		t.Fatalf("unreachable: %+v", got)
	}
	if r := recorded(t, st); r == nil || r.Pinned || r.Reason != imagepin.ReasonUnreachable {
		t.Fatalf("recorded %+v, want the reason for status", r)
	}
	ln, err = net.Listen("tcp", host)
	if err != nil {
		t.Fatalf("the port was taken meanwhile (rerun): %v", err)
	}
	srv := httptest.NewUnstartedServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	srv.Listener.Close()
	srv.Listener = ln
	srv.Start()
	t.Cleanup(srv.Close)
	want := pushTo(t, ref)
	if got := p.Image(ctx); got.Pinned {
		t.Fatalf("asked again before RetryAfter: %+v", got)
	}
	clk.Advance(imagepin.RetryAfter)
	if got := p.Image(ctx); got.Image != want {
		t.Fatalf("after RetryAfter: %+v, want %s", got, want)
	}
}

// resolveDigest: false and a configured digest never ask the registry (it
// does not exist here); both are recorded for status.
func TestPinOffAndConfiguredDigestAskNobody(t *testing.T) {
	st := statetest.Open(t)
	never := func(context.Context, string) (string, error) {
		t.Error("the registry was asked")
		return "", errors.New("asked")
	}
	p := &imagepin.Pinner{Ref: "127.0.0.1:1/a/b:v1", Off: true, Records: imagepin.StoreRecords{Store: st},
		Resolve: never, Log: zerolog.Nop()}
	if got := p.Image(t.Context()); got.Pinned || got.Reason != imagepin.ReasonOff || got.Image != p.Ref {
		t.Fatalf("off: %+v", got)
	}
	if r := recorded(t, st); r == nil || r.Reason != imagepin.ReasonOff {
		t.Fatalf("recorded %+v", r)
	}
	d := "127.0.0.1:1/a/b:v1@sha256:" + strings.Repeat("cd", 32)
	p = &imagepin.Pinner{Ref: d, Records: imagepin.StoreRecords{Store: st}, Resolve: never, Log: zerolog.Nop()}
	if got := p.Image(t.Context()); !got.Pinned || got.Source != "config" || got.Image != d {
		t.Fatalf("configured digest: %+v", got)
	}
}

// A caller that gives up (the agent stopping) is no answer of the
// registry's: nothing is recorded, and the next call asks.
func TestPinCancelledIsNotAnAnswer(t *testing.T) {
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(srv.Close)
	ref := strings.TrimPrefix(srv.URL, "http://") + "/team/fleet-agent:v1"
	want := pushTo(t, ref)
	st := statetest.Open(t)
	p := &imagepin.Pinner{Ref: ref, Resolve: imageref.Resolver{Timeout: 5 * time.Second}.Resolve,
		Records: imagepin.StoreRecords{Store: st}, Clock: clock.NewFake(time.Unix(1_800_000_000, 0)), Log: zerolog.Nop()}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if got := p.Image(ctx); got.Pinned || got.Image != ref {
		t.Fatalf("cancelled: %+v", got)
	}
	if r := recorded(t, st); r != nil {
		t.Fatalf("a cancelled ask was recorded: %+v", r)
	}
	if got := p.Image(t.Context()); got.Image != want {
		t.Fatalf("the next call: %+v, want %s", got, want)
	}
}

// A registry's words in the detail are printable and bounded: its error
// text with a terminal escape and far over MaxDetail is cut and cleaned.
func TestPinDetailFromAHostileRegistry(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// The first request, GET /v2/, is refused with a body (a HEAD's
		// answer has none to carry words).
		w.WriteHeader(http.StatusForbidden)
		fmt.Fprintf(w, `{"errors":[{"code":"DENIED","message":"\u001b]0;owned\u0007\u001b[2J%s"}]}`, strings.Repeat("x", 5000))
	}))
	t.Cleanup(srv.Close)
	ref := strings.TrimPrefix(srv.URL, "http://") + "/a/b:v1"
	p := &imagepin.Pinner{Ref: ref, Resolve: imageref.Resolver{Timeout: 5 * time.Second}.Resolve, Log: zerolog.Nop()}
	got := p.Image(t.Context())
	if got.Pinned || got.Reason != imagepin.ReasonRefused {
		t.Fatalf("%+v", got)
	}
	if strings.ContainsAny(got.Detail, "\x1b\x07") || len(got.Detail) > imagepin.MaxDetail+3 {
		t.Fatalf("detail not cleaned (%d bytes): %q", len(got.Detail), got.Detail)
	}
	if !strings.Contains(got.Detail, "refused to show") || !strings.Contains(got.Detail, "owned") {
		t.Fatalf("detail lost what to fix: %q", got.Detail)
	}
}

// serveAt serves h at addr (a loopback host:port) until the returned stop.
func serveAt(t *testing.T, addr string, h http.Handler) (stop func()) {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	srv := &httptest.Server{Listener: ln, Config: &http.Server{Handler: h}}
	srv.Start()
	t.Cleanup(srv.Close)
	return srv.Close
}

// What status and doctor read is the record: a restart while the registry
// is down records that this start kept the recorded digest (source record,
// the reason, a detail, when it was asked), each later failed ask says so
// again, and the first ask that succeeds records the registry as the
// source.
func TestRecordSaysThePinCameFromTheRecord(t *testing.T) {
	reg := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	stop := serveAt(t, addr, reg)
	ref := addr + "/team/fleet-agent:v1"
	want := pushTo(t, ref)
	st := statetest.Open(t)
	clk := clock.NewFake(time.Unix(1_800_000_000, 0))
	start := func() *imagepin.Pinner {
		return &imagepin.Pinner{Ref: ref, Resolve: imageref.Resolver{Timeout: 5 * time.Second}.Resolve,
			Records: imagepin.StoreRecords{Store: st}, Clock: clk, Log: zerolog.Nop()}
	}
	ctx := t.Context()
	if got := start().Image(ctx); got.Source != "registry" || got.Image != want {
		t.Fatalf("first ask: %+v", got)
	}

	stop()
	clk.Advance(time.Hour)
	p := start() // a restart with the registry down
	p.Image(ctx)
	r := recorded(t, st)
	if r == nil || r.Image != want || !r.Pinned || r.Source != "record" || r.Reason != imagepin.ReasonUnreachable ||
		r.Detail == "" || r.At != clk.Now().UnixMilli() {
		t.Fatalf("recorded after a restart with the registry down: %+v, want %s from the record, %s, asked at %d",
			r, want, imagepin.ReasonUnreachable, clk.Now().UnixMilli())
	}

	clk.Advance(imagepin.RetryAfter + time.Minute)
	p.Image(ctx) // asked again, still down
	if r := recorded(t, st); r == nil || r.Source != "record" || r.Reason != imagepin.ReasonUnreachable || r.At != clk.Now().UnixMilli() {
		t.Fatalf("recorded after the re-ask failed: %+v, want from the record, asked at %d", r, clk.Now().UnixMilli())
	}

	serveAt(t, addr, reg)
	clk.Advance(imagepin.RetryAfter)
	if got := p.Image(ctx); got.Source != "registry" || got.Reason != "" {
		t.Fatalf("the registry is back: %+v", got)
	}
	if r := recorded(t, st); r == nil || r.Image != want || r.Source != "registry" || r.Reason != "" || r.Detail != "" ||
		r.At != clk.Now().UnixMilli() {
		t.Fatalf("recorded once the registry is back: %+v", r)
	}
}
