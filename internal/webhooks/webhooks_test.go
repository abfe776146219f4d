package webhooks_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/fleet-agent/fleet-agent/internal/clock"
	"github.com/fleet-agent/fleet-agent/internal/events"
	"github.com/fleet-agent/fleet-agent/internal/outbox"
	"github.com/fleet-agent/fleet-agent/internal/secrets"
	"github.com/fleet-agent/fleet-agent/internal/state"
	"github.com/fleet-agent/fleet-agent/internal/webhooks"
)

const canary = "CANARY-7f3a9c-not-for-anyone"

// receiver is a webhook receiver on loopback: it verifies each request's
// signature and counts accepted events by their CloudEvents id, as a
// receiver that deduplicates would.
type receiver struct {
	t      *testing.T
	secret string
	mu     sync.Mutex
	byID   map[string]int
	bodies [][]byte
	bad    int
	// status answers every request when not 0.
	status int
	// hold, when set, blocks a request until its connection ends; the
	// event is then not accepted (the receiver never answered).
	hold    chan struct{}
	arrived chan string
	srv     *httptest.Server
}

func newReceiver(t *testing.T, secret string) *receiver {
	r := &receiver{t: t, secret: secret, byID: map[string]int{}, arrived: make(chan string, 100)}
	r.srv = httptest.NewServer(http.HandlerFunc(r.serve))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *receiver) serve(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	var ce struct {
		ID          string `json:"id"`
		SpecVersion string `json:"specversion"`
	}
	_ = json.Unmarshal(body, &ce)
	r.mu.Lock()
	r.bodies = append(r.bodies, body)
	hold, status := r.hold, r.status
	r.mu.Unlock()
	r.arrived <- ce.ID
	if hold != nil {
		select {
		case <-hold:
		case <-req.Context().Done():
			return
		}
	}
	if status != 0 {
		w.WriteHeader(status)
		_, _ = w.Write([]byte("receiver says " + canary))
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if !events.Verify(body, r.secret, req.Header.Get(events.SignatureHeader)) || ce.SpecVersion != "1.0" {
		r.bad++
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	r.byID[ce.ID]++
	w.WriteHeader(http.StatusAccepted)
}

func (r *receiver) counts() (map[string]int, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string]int{}
	for k, v := range r.byID {
		out[k] = v
	}
	return out, r.bad
}

type env map[string]string

func (e env) lookup(k string) (string, bool) { v, ok := e[k]; return v, ok }

func openStore(t *testing.T, path string) *state.Store {
	t.Helper()
	s, err := state.Open(path, state.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func event(id, typ, subject string) events.Event {
	return events.Event{ID: id, Type: typ, Source: "fleet-agent://test", Subject: subject,
		Time: time.Date(2026, 12, 6, 3, 0, 0, 0, time.UTC), Summary: typ + " " + subject}
}

func enqueue(t *testing.T, s *state.Store, hooks []webhooks.Hook, evs ...events.Event) {
	t.Helper()
	if err := s.Update(func(tx *state.Tx) error {
		for _, e := range evs {
			if err := webhooks.Enqueue(tx, hooks, e, time.Now()); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

func TestReceiverGetsEachEventOnceSigned(t *testing.T) {
	r := newReceiver(t, "k1")
	res := secrets.NewResolver(secrets.Options{Env: env{"HOOK_KEY": "k1"}.lookup})
	s := openStore(t, filepath.Join(t.TempDir(), "state.db"))
	defer s.Close()
	hooks := []webhooks.Hook{{URL: r.srv.URL, Secret: "env://HOOK_KEY", Events: []string{events.Applied, events.Drifted}}}
	enqueue(t, s, hooks,
		event("e1", events.Applied, "commit/a"),
		event("e2", events.Drifted, "fleet/x"),
		event("e3", events.Refused, "commit/b"), // not wanted
		event("e4", events.Drifted, "fleet/x"),  // coalesced with e2
	)
	d := &webhooks.Deliverer{Store: s, Hooks: hooks, Secrets: res, Clock: clock.NewFake(time.Now())}
	for range 2 { // the second flush finds nothing to send again
		if _, err := d.Flush(t.Context(), hooks[0]); err != nil {
			t.Fatal(err)
		}
	}
	got, bad := r.counts()
	want := map[string]int{"e1": 1, "e4": 1}
	if bad != 0 || len(got) != len(want) || got["e1"] != 1 || got["e4"] != 1 {
		t.Fatalf("receiver got %v (bad signatures %d), want %v", got, bad, want)
	}
	var st []webhooks.Status
	if err := s.View(func(tx *state.Tx) (err error) { st, err = webhooks.Statuses(tx, hooks); return }); err != nil {
		t.Fatal(err)
	}
	if len(st) != 1 || st[0].Queued != 0 || st[0].Delivered != 2 || len(st[0].Recent) != 2 || st[0].Recent[1].ID != "e4" || st[0].Recent[1].Code != http.StatusAccepted {
		t.Fatalf("status = %+v", st)
	}
}

func TestRestartMidDeliveryDeliversOnce(t *testing.T) {
	r := newReceiver(t, "k1")
	r.hold = make(chan struct{})
	res := secrets.NewResolver(secrets.Options{Env: env{"HOOK_KEY": "k1"}.lookup})
	path := filepath.Join(t.TempDir(), "state.db")
	hooks := []webhooks.Hook{{URL: r.srv.URL, Secret: "env://HOOK_KEY"}}

	s := openStore(t, path)
	enqueue(t, s, hooks, event("e1", events.Converged, "fleet"), event("e2", events.Applied, "commit/a"))
	ctx, stop := context.WithCancel(t.Context())
	done := make(chan error, 1)
	d := &webhooks.Deliverer{Store: s, Hooks: hooks, Secrets: res, Clock: clock.NewFake(time.Now())}
	go func() { _, err := d.Flush(ctx, hooks[0]); done <- err }()
	if id := <-r.arrived; id != "e1" {
		t.Fatalf("first request carried %q, want e1", id)
	}
	stop() // the agent stops while the receiver has not answered
	if err := <-done; err == nil {
		t.Fatal("Flush returned no error after its context ended mid-send")
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	r.mu.Lock()
	r.hold = nil
	r.mu.Unlock()

	for run := range 2 { // restarted; and restarted again after delivering
		s = openStore(t, path)
		d = &webhooks.Deliverer{Store: s, Hooks: hooks, Secrets: res, Clock: clock.NewFake(time.Now())}
		if _, err := d.Flush(t.Context(), hooks[0]); err != nil {
			t.Fatalf("run %d: %v", run, err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
	got, bad := r.counts()
	if bad != 0 || len(got) != 2 || got["e1"] != 1 || got["e2"] != 1 {
		t.Fatalf("receiver accepted %v (bad %d), want e1 and e2 once each", got, bad)
	}
	r.mu.Lock()
	sends := len(r.bodies)
	r.mu.Unlock()
	if sends != 3 { // e1 cut off, e1 again with the same id, e2
		t.Fatalf("%d requests reached the receiver, want 3", sends)
	}
}

// sender is a GitHub outbox Sender that records what it posts.
type sender struct {
	mu    sync.Mutex
	posts []string
	sent  chan struct{}
}

func (g *sender) note(s string) error {
	g.mu.Lock()
	g.posts = append(g.posts, s)
	g.mu.Unlock()
	g.sent <- struct{}{}
	return nil
}
func (g *sender) SetStatus(_ context.Context, sha, c, st, _, _ string) error {
	return g.note(sha + "/" + c + "=" + st)
}
func (g *sender) StatusIsLatest(context.Context, string, string, string, string, string) (bool, error) {
	return false, nil
}
func (g *sender) UpsertComment(_ context.Context, pr int, m, _ string) error { return g.note(m) }
func (g *sender) AddCommentOnce(_ context.Context, pr int, m, _ string) error {
	return g.note(m)
}

func TestFailingReceiverHoldsNothingElse(t *testing.T) {
	failing := newReceiver(t, "k1")
	failing.status = http.StatusInternalServerError
	ok := newReceiver(t, "k2")
	res := secrets.NewResolver(secrets.Options{Env: env{"K1": "k1", "K2": "k2"}.lookup})
	s := openStore(t, filepath.Join(t.TempDir(), "state.db"))
	defer s.Close()
	hooks := []webhooks.Hook{{URL: failing.srv.URL, Secret: "env://K1"}, {URL: ok.srv.URL, Secret: "env://K2"}}
	clk := clock.NewFake(time.Now())
	g := &sender{sent: make(chan struct{}, 10)}
	ob := outbox.New(s, g, outbox.Options{Clock: clk, MinSpacing: outbox.NoSpacing})
	// The events and a GitHub status are queued together, events first.
	if err := s.Update(func(tx *state.Tx) error {
		for _, e := range []events.Event{event("e1", events.Applied, "commit/a"), event("e2", events.Drifted, "fleet")} {
			if err := webhooks.Enqueue(tx, hooks, e, clk.Now()); err != nil {
				return err
			}
		}
		return ob.Enqueue(tx, outbox.Status("0123456789abcdef0123456789abcdef01234567", "apply", "success", "applied", ""))
	}); err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(t.Context())
	defer stop()
	d := &webhooks.Deliverer{Store: s, Hooks: hooks, Secrets: res, Clock: clk}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); d.Run(ctx) }()
	go func() { defer wg.Done(); _ = ob.Run(ctx) }()
	d.Wake()
	ob.Wake()
	<-g.sent // the GitHub post went out while the first receiver fails
	for {    // the other webhook got both events; the failing one is held
		got, _ := ok.counts()
		if got["e1"] == 1 && got["e2"] == 1 {
			break
		}
		<-ok.arrived
	}
	<-failing.arrived
	var st []webhooks.Status
	// Until the failure and both deliveries are recorded (two transactions
	// after requests the receivers have seen: the test's deadline bounds it).
	for st == nil || st[0].HeldUntil == nil || st[1].Queued != 0 {
		<-time.After(time.Millisecond)
		if err := s.View(func(tx *state.Tx) (err error) { st, err = webhooks.Statuses(tx, hooks); return }); err != nil {
			t.Fatal(err)
		}
	}
	stop()
	wg.Wait()
	if st[0].Queued != 2 || st[0].LastError != "HTTP 500" || st[0].Failed != 1 || st[1].Queued != 0 {
		t.Fatalf("statuses = %+v", st)
	}
	if got, _ := failing.counts(); len(got) != 0 {
		t.Fatalf("the failing receiver accepted %v", got)
	}
}

func TestCanarySecretNeverLeaks(t *testing.T) {
	r := newReceiver(t, canary)
	r.status = http.StatusBadRequest // answers with the canary in its body
	res := secrets.NewResolver(secrets.Options{Env: env{"HOOK_KEY": canary, "HOOK_URL": r.srv.URL + "/" + canary}.lookup})
	path := filepath.Join(t.TempDir(), "state.db")
	s := openStore(t, path)
	hooks := []webhooks.Hook{{URL: "env://HOOK_URL", Secret: "env://HOOK_KEY", Format: "slack"}, {URL: r.srv.URL, Secret: "env://HOOK_KEY"}}
	// A provider's message that quotes the secret is masked on the way out.
	leaky := event("e1", events.SubstrateError, "substrate/p1")
	leaky.Summary = "the provider said: bad key " + canary
	leaky.Data = map[string]any{"message": "rejected " + canary}
	enqueue(t, s, hooks, leaky)
	// Queued through the agent's Queue, with the secret already resolved,
	// it is masked before it reaches the state file.
	if _, err := res.Resolve(t.Context(), "env://HOOK_KEY"); err != nil {
		t.Fatal(err)
	}
	q := &webhooks.Queue{Hooks: hooks[1:], Redact: res.Redactor().Redact}
	leaky2 := leaky
	leaky2.ID, leaky2.Subject = "e2", "substrate/p2"
	if err := s.Update(func(tx *state.Tx) error { return q.Enqueue(tx, leaky2) }); err != nil {
		t.Fatal(err)
	}
	var queued []byte
	if err := s.View(func(tx *state.Tx) error {
		return tx.EventQueue(hooks[1].ID()).Entries(func(e state.OutboxEntry) error { queued = append(queued, e.Data...); return nil })
	}); err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(queued, []byte(`"id":"e2"`)) || bytes.Count(queued, []byte(canary)) != 2 {
		t.Fatalf("the queue holds %s: want e2 masked beside e1 as enqueued unmasked", queued)
	}
	var log bytes.Buffer
	d := &webhooks.Deliverer{Store: s, Hooks: hooks, Secrets: res, Clock: clock.NewFake(time.Now()), Log: zerolog.New(&log),
		Redact: res.Redactor().Redact}
	for _, h := range hooks {
		if _, err := d.Flush(t.Context(), h); err != nil {
			t.Fatal(err)
		}
	}
	var st []webhooks.Status
	if err := s.View(func(tx *state.Tx) (err error) { st, err = webhooks.Statuses(tx, hooks); return }); err != nil {
		t.Fatal(err)
	}
	status, _ := json.Marshal(st)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	r.mu.Lock()
	bodies := bytes.Join(r.bodies, nil)
	r.mu.Unlock()
	if len(r.bodies) != 3 || st[0].Dropped != 1 || st[1].Dropped != 2 {
		t.Fatalf("%d requests, statuses %s: want one refused request per webhook", len(r.bodies), status)
	}
	// The state file holds the event as queued (the agent's own text); what
	// leaves the machine is masked.
	for name, b := range map[string][]byte{"event": bodies, "status": status, "log": log.Bytes()} {
		if bytes.Contains(b, []byte(canary)) {
			t.Errorf("the canary secret is in the %s", name)
		}
	}
	if !bytes.Contains(log.Bytes(), []byte("dropped")) {
		t.Errorf("no drop in the log: %s", log.String())
	}
}
