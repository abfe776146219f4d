package webhooks

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/fleet-agent/fleet-agent/internal/backoff"
	"github.com/fleet-agent/fleet-agent/internal/clock"
	"github.com/fleet-agent/fleet-agent/internal/events"
	"github.com/fleet-agent/fleet-agent/internal/state"
)

// Resolver resolves a secret reference to its value.
type Resolver interface {
	Resolve(ctx context.Context, ref string) (string, error)
}

// Deliverer runs one delivery loop per webhook.
type Deliverer struct {
	Store   *state.Store
	Hooks   []Hook
	Secrets Resolver
	Client  *http.Client // nil: a client with a 30 s timeout
	Clock   clock.Clock  // nil: the real clock
	Log     zerolog.Logger
	// MinBackoff and MaxBackoff bound the wait after a failure (2 s and
	// 5 min by default), doubling from one to the other.
	MinBackoff, MaxBackoff time.Duration
	// Redact masks every secret value the agent resolved (the resolver's
	// redactor) in an event's text before it is sent; nil for none.
	Redact func(string) string

	once sync.Once
	wake map[string]chan struct{}
}

func (d *Deliverer) init() {
	d.once.Do(func() {
		d.wake = map[string]chan struct{}{}
		for _, h := range d.Hooks {
			d.wake[h.ID()] = make(chan struct{}, 1)
		}
		if d.Client == nil {
			d.Client = &http.Client{Timeout: 30 * time.Second}
		}
		if d.Clock == nil {
			d.Clock = clock.Real{}
		}
		if d.MinBackoff <= 0 {
			d.MinBackoff = 2 * time.Second
		}
		if d.MaxBackoff <= 0 {
			d.MaxBackoff = 5 * time.Minute
		}
	})
}

// Wake tells every loop that something may be queued; call it after the
// transaction that queued it committed.
func (d *Deliverer) Wake() {
	if d == nil {
		return
	}
	d.init()
	for _, c := range d.wake {
		select {
		case c <- struct{}{}:
		default:
		}
	}
}

// Run delivers until ctx ends, one goroutine per webhook.
func (d *Deliverer) Run(ctx context.Context) {
	d.init()
	var wg sync.WaitGroup
	for _, h := range d.Hooks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d.loop(ctx, h)
		}()
	}
	wg.Wait()
}

func (d *Deliverer) loop(ctx context.Context, h Hook) {
	for {
		wait, err := d.Flush(ctx, h)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			d.Log.Error().Str("webhook", h.ID()).Str("receiver", h.Display()).Err(err).Msg("events: the webhook's queue cannot be read; retrying")
			wait = d.MaxBackoff
		}
		var timer <-chan time.Time
		if wait > 0 {
			timer = d.Clock.After(wait)
		}
		select {
		case <-ctx.Done():
			return
		case <-d.wake[h.ID()]:
		case <-timer:
		}
	}
}

// Flush delivers h's due events oldest first. It returns how long until
// the head of the queue is due (0 when the queue is empty).
func (d *Deliverer) Flush(ctx context.Context, h Hook) (time.Duration, error) {
	d.init()
	for ctx.Err() == nil {
		wait, more, err := d.step(ctx, h)
		if err != nil || !more {
			return wait, err
		}
	}
	return 0, ctx.Err()
}

// step sends the head of h's queue once. more is true when the next entry
// may be sent at once.
func (d *Deliverer) step(ctx context.Context, h Hook) (wait time.Duration, more bool, err error) {
	now := d.Clock.Now()
	var head state.OutboxEntry
	var rec record
	var found bool
	err = d.Store.Update(func(tx *state.Tx) error {
		q := tx.EventQueue(h.ID())
		e, ok, err := q.First()
		if err != nil || !ok {
			return err
		}
		r, err := decode(e)
		if err != nil {
			return err
		}
		if r.NotBefore > now.UnixMilli() {
			wait = time.UnixMilli(r.NotBefore).Sub(now)
			return nil
		}
		if r.InFlight {
			d.Log.Warn().Str("webhook", h.ID()).Str("event", r.Event.ID).Msg("events: an earlier send of this event may have reached the receiver; sending it again with the same id")
		}
		r.InFlight = true
		head, rec, found = e, r, true
		return q.Replace(e.Seq, r.encode())
	})
	if err != nil || !found {
		return wait, false, err
	}
	code, class, retry, retryAfter := d.send(ctx, h, rec.Event)
	if ctx.Err() != nil {
		// Stopped mid-send: the in-flight mark stays, and the next run
		// sends the same event again with the same id.
		return 0, false, ctx.Err()
	}
	at := d.Clock.Now()
	out := Delivery{ID: rec.Event.ID, Type: rec.Event.Type, Subject: rec.Event.Subject, At: at.UTC(), Code: code, Error: class}
	err = d.Store.Update(func(tx *state.Tx) error {
		q := tx.EventQueue(h.ID())
		cur, ok, err := q.Get(head.Seq)
		if err != nil {
			return err
		}
		r := rec
		if ok {
			if r, err = decode(cur); err != nil {
				return err
			}
		}
		m, err := readMeta(q)
		if err != nil {
			return err
		}
		switch {
		case class == "":
			if ok && r.Rev == rec.Rev {
				err = q.Delete(head.Seq)
			} else if ok { // replaced while sent: the newer event is due now
				r.InFlight, r.Attempts, r.NotBefore, r.LastError = false, 0, 0, ""
				err = q.Replace(head.Seq, r.encode())
			}
		case !retry:
			out.Dropped = true
			d.Log.Error().Str("webhook", h.ID()).Str("receiver", h.Display()).Str("event", rec.Event.ID).Str("type", rec.Event.Type).
				Int("code", code).Str("reason", class).Msg("events: the receiver refused the event; dropped (the same request would be refused again)")
			if ok && r.Rev == rec.Rev {
				err = q.Delete(head.Seq)
			} else if ok {
				r.InFlight = false
				err = q.Replace(head.Seq, r.encode())
			}
		default:
			if ok {
				r.InFlight = false
				r.Attempts++
				r.LastError = class
				hold := d.backoff(r.Attempts)
				if retryAfter > hold {
					hold = retryAfter
				}
				wait = hold
				r.NotBefore = at.Add(hold).UnixMilli()
				d.Log.Warn().Str("webhook", h.ID()).Str("receiver", h.Display()).Str("event", rec.Event.ID).Int("attempts", r.Attempts).
					Str("reason", class).Dur("retryIn", hold).Msg("events: delivery failed; retrying")
				err = q.Replace(head.Seq, r.encode())
			}
		}
		if err != nil {
			return err
		}
		m.add(out)
		data, err := jsonMarshal(m)
		if err != nil {
			return err
		}
		return q.SetMeta(data)
	})
	if err != nil {
		return 0, false, err
	}
	if class != "" && retry {
		return wait, false, nil
	}
	return 0, true, nil
}

// backoff is MinBackoff doubled for each failure after the first, capped;
// exact, since the hold it makes is persisted.
func (d *Deliverer) backoff(attempts int) time.Duration {
	return backoff.Wait(attempts, d.MinBackoff, d.MaxBackoff, nil)
}

// send makes one request. class is "" for a 2xx, otherwise the failure's
// class (never the receiver's answer, the URL or a secret); retry says
// whether the same request may succeed later.
func (d *Deliverer) send(ctx context.Context, h Hook, e events.Event) (code int, class string, retry bool, retryAfter time.Duration) {
	target, ok := resolveMaybe(ctx, d.Secrets, h.URL)
	if !ok {
		return 0, "the URL's reference does not resolve", true, 0
	}
	secret := ""
	if h.Secret != "" {
		s, err := d.Secrets.Resolve(ctx, h.Secret)
		if err != nil {
			return 0, "the secret's reference does not resolve", true, 0
		}
		secret = s
	}
	req, err := events.Render(redact(e, d.Redact), h.Format, secret)
	if err != nil {
		return 0, "the event cannot be rendered", false, 0
	}
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, target, bytes.NewReader(req.Body))
	if err != nil {
		return 0, "the URL is not valid", false, 0
	}
	hr.Header = req.Header
	hr.Header.Set("User-Agent", "fleet-agent")
	resp, err := d.Client.Do(hr)
	if err != nil {
		// Never the error's text: a *url.Error quotes the URL.
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return 0, "timeout", true, 0
		}
		return 0, "network error", true, 0
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	_ = resp.Body.Close()
	code = resp.StatusCode
	switch {
	case code >= 200 && code < 300:
		return code, "", false, 0
	case code == http.StatusTooManyRequests || code == http.StatusRequestTimeout || code >= 500:
		if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && s > 0 {
			retryAfter = min(time.Duration(s)*time.Second, time.Hour)
		}
		return code, "HTTP " + strconv.Itoa(code), true, retryAfter
	default:
		return code, "HTTP " + strconv.Itoa(code), false, 0
	}
}

// resolveMaybe resolves a URL written as a secret reference.
func resolveMaybe(ctx context.Context, r Resolver, u string) (string, bool) {
	if !isRef(u) {
		return u, true
	}
	v, err := r.Resolve(ctx, u)
	return v, err == nil
}

// redact masks secret values in the event's summary and string data: a
// message from a provider may quote what it was given.
func redact(e events.Event, fn func(string) string) events.Event {
	if fn == nil {
		return e
	}
	e.Summary = fn(e.Summary)
	if e.Data != nil {
		data := make(map[string]any, len(e.Data))
		for k, v := range e.Data {
			if s, ok := v.(string); ok {
				v = fn(s)
			}
			data[k] = v
		}
		e.Data = data
	}
	return e
}
