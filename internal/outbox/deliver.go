package outbox

import (
	"context"
	"errors"
	"sort"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/rs/zerolog"

	"github.com/fleet-agent/fleet-agent/internal/backoff"
	"github.com/fleet-agent/fleet-agent/internal/clock"
	"github.com/fleet-agent/fleet-agent/internal/state"
)

// Sender is what the outbox asks of GitHub. The forge satisfies it through
// forge.(*GitHub).Poster; plain types keep this package free of the forge.
//
// Errors should carry a class and a retry time: the outbox looks for
// ClassName() string (the forge's class words: unauthorized, forbidden,
// not_found, validation, content_limited, rate_limited,
// secondary_rate_limited, server, network, credentials, unexpected) and for
// Retryable() bool and
// RetryAt(now) time.Time. An error with neither is taken as retryable, and as
// possibly done.
type Sender interface {
	// SetStatus sets a commit status on sha.
	SetStatus(ctx context.Context, sha, context, state, description, targetURL string) error
	// StatusIsLatest reports whether the newest status on sha for context
	// is identical to this one. It is asked only for a status that may
	// have been posted already (in flight at a crash, or a lost answer).
	StatusIsLatest(ctx context.Context, sha, context, state, description, targetURL string) (bool, error)
	// UpsertComment keeps the one comment holding marker on pull request
	// pr and makes its body body; it finds the comment by its marker.
	UpsertComment(ctx context.Context, pr int, marker, body string) error
	// AddCommentOnce posts body unless a comment holding marker is on the
	// pull request already.
	AddCommentOnce(ctx context.Context, pr int, marker, body string) error
}

// CheckSender is a Sender that also posts check runs (the forge does with
// GitHub App credentials). A check post reaching a Sender that is not one is
// dropped as forbidden: a user token cannot post check runs, and the agent
// queues none then.
type CheckSender interface {
	// SetCheckRun makes the newest check run named by context on sha the
	// given one. Sent again with the same content (after a crash or a lost
	// answer) it creates nothing new: it finds the run and adds only the
	// annotations not yet on it.
	SetCheckRun(ctx context.Context, sha, context, state, title, summary string, annotations []Annotation) error
}

// The classes the outbox tells apart (the forge's words).
const (
	classUnauthorized = "unauthorized"
	classCredentials  = "credentials"
	classForbidden    = "forbidden"
	classNotFound     = "not_found"
	classValidation   = "validation"
	classContentLimit = "content_limited"
	classRateLimited  = "rate_limited"
	classSecondary    = "secondary_rate_limited"
	classServer       = "server"
	classNetwork      = "network"
	classUnexpected   = "unexpected"
)

// Defaults of Options.
const (
	DefaultMinBackoff   = 2 * time.Second
	DefaultMaxBackoff   = 5 * time.Minute
	DefaultAuthAttempts = 20
	// DefaultContentLimitAttempts: 20 tries spread over about 70 minutes
	// (a minute each at first, as GitHub asks, then the backoff's cap),
	// past GitHub's hourly content limit.
	DefaultContentLimitAttempts = 20
	DefaultIdle                 = time.Minute
	DefaultMinSpacing           = time.Second
)

// NoSpacing, as Options.MinSpacing, sends back to back: for tests that drain
// the queue with Flush on a clock that moves only when told to.
const NoSpacing time.Duration = -1

// Options tune an Outbox.
type Options struct {
	// Clock times holds and backoff (default: the wall clock).
	Clock clock.Clock
	// Log receives a line per dropped post (error), per failure (warn) and
	// per delivery (debug). Default: none.
	Log zerolog.Logger
	// MinBackoff is the wait after the first failure; it doubles with each
	// failure of the same post up to MaxBackoff (defaults 2 s and 5 min).
	MinBackoff, MaxBackoff time.Duration
	// AuthAttempts is how many times a post meeting 401 (or a credential
	// that does not resolve) is tried before it is dropped (default 20,
	// about an hour).
	AuthAttempts int
	// ContentLimitAttempts is how many times a comment meeting GitHub's
	// content limit (a 422 that is not about its content) is tried before
	// it is dropped (default DefaultContentLimitAttempts).
	ContentLimitAttempts int
	// Idle is how often Run looks at an empty queue, for posts queued with
	// the package's Enqueue, which wakes nothing (default 1 min). It reads
	// the state file only: an idle outbox sends nothing.
	Idle time.Duration
	// MinSpacing is the least time between two sends, on Clock (default
	// 1 s; NoSpacing or any negative value: none). GitHub asks for at least
	// a second between write requests, and its secondary limits cap content
	// creation (80 a minute, 500 an hour): a queue drained back to back
	// after an outage would meet them again and again, and requests sent
	// while limited count against the integration.
	MinSpacing time.Duration
}

// Stats is what the outbox reports for metrics.
type Stats struct {
	// Delivered and Dropped count posts since New.
	Delivered, Dropped uint64
	// Failures counts failed sends since New (each retry counts).
	Failures uint64
	// LastDelivery is when a post was last delivered.
	LastDelivery time.Time
	// LastError and LastErrorAt are the last failure, "" when none.
	LastError   string
	LastErrorAt time.Time
	// HeldUntil is when the oldest post may be sent again; zero when it is
	// not held.
	HeldUntil time.Time
}

// Outbox delivers the queued posts of one state file through one Sender.
// Its methods are safe for concurrent use; one post is sent at a time.
type Outbox struct {
	store *state.Store
	send  Sender
	opts  Options
	clock clock.Clock
	log   zerolog.Logger
	wake  chan struct{}

	// deliver is held for one step: Run and Flush never send at once.
	deliver sync.Mutex
	// lastSend is when the Sender last returned (held under deliver).
	lastSend time.Time

	mu    sync.Mutex
	stats Stats
	drops map[dropKey]uint64
	// lastStatus is, per status key, the status this process delivered
	// last (the newest few only): the note of a dropped comment repeats it.
	lastStatus map[string]Post
	lastOrder  []string

	// pairTx and pairStatus remember the first status queued in the
	// current write transaction, for the comments queued after it there.
	// bbolt runs one write transaction at a time, and the pointer kept
	// keeps a finished transaction's Tx from being reused as another's.
	pairMu     sync.Mutex
	pairTx     *state.Tx
	pairStatus *Post

	// afterSend, for tests, runs after a send GitHub took and before it is
	// recorded; true stops there as if the process died.
	afterSend func(Post) bool
}

// New makes an outbox over store. It sends nothing until Run or Flush.
func New(store *state.Store, send Sender, opts Options) *Outbox {
	if opts.Clock == nil {
		opts.Clock = clock.Real{}
	}
	if opts.MinBackoff <= 0 {
		opts.MinBackoff = DefaultMinBackoff
	}
	if opts.MaxBackoff <= 0 {
		opts.MaxBackoff = DefaultMaxBackoff
	}
	if opts.MaxBackoff < opts.MinBackoff {
		opts.MaxBackoff = opts.MinBackoff
	}
	if opts.AuthAttempts <= 0 {
		opts.AuthAttempts = DefaultAuthAttempts
	}
	if opts.ContentLimitAttempts <= 0 {
		opts.ContentLimitAttempts = DefaultContentLimitAttempts
	}
	if opts.Idle <= 0 {
		opts.Idle = DefaultIdle
	}
	switch {
	case opts.MinSpacing == 0:
		opts.MinSpacing = DefaultMinSpacing
	case opts.MinSpacing < 0:
		opts.MinSpacing = 0
	}
	return &Outbox{store: store, send: send, opts: opts, clock: opts.Clock, log: opts.Log,
		wake: make(chan struct{}, 1), drops: map[dropKey]uint64{}, lastStatus: map[string]Post{}}
}

// Enqueue queues p inside tx, like the package's Enqueue, and wakes Run when
// tx commits. It never waits for GitHub. A comment is paired with the first
// status queued through it in the same transaction: the status that tells
// the reviewer when the comment cannot be posted.
func (o *Outbox) Enqueue(tx *state.Tx, p Post) error {
	if err := p.Validate(); err != nil {
		return err
	}
	if err := enqueue(tx, p, o.pair(tx, p), o.clock.Now().UnixMilli()); err != nil {
		return err
	}
	tx.OnCommit(o.Wake)
	return nil
}

// pair records the first status of tx, and returns it for a comment of tx.
func (o *Outbox) pair(tx *state.Tx, p Post) *Post {
	o.pairMu.Lock()
	defer o.pairMu.Unlock()
	if p.Kind == KindStatus {
		if o.pairTx != tx {
			st := p
			o.pairTx, o.pairStatus = tx, &st
		}
		return nil
	}
	if o.pairTx != tx || p.Kind == KindCheck {
		// A check run stands beside its status, it does not explain it:
		// a dropped one is logged and counted, and the status keeps its
		// own words rather than say a comment was lost.
		return nil
	}
	st := *o.pairStatus
	return &st
}

// Add queues posts in a transaction of its own.
func (o *Outbox) Add(posts ...Post) error {
	return o.store.Update(func(tx *state.Tx) error {
		for _, p := range posts {
			if err := o.Enqueue(tx, p); err != nil {
				return err
			}
		}
		return nil
	})
}

// Wake makes Run look at the queue now.
func (o *Outbox) Wake() {
	select {
	case o.wake <- struct{}{}:
	default:
	}
}

// Depth counts the queued posts.
func (o *Outbox) Depth() (int, error) {
	var n int
	err := o.store.View(func(tx *state.Tx) error {
		var err error
		n, err = tx.OutboxLen()
		return err
	})
	return n, err
}

// Stats returns the counters and the last delivery and error.
func (o *Outbox) Stats() Stats {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.stats
}

// Run delivers until ctx ends: at once when woken (Enqueue, Wake), when a
// hold ends, and every Idle otherwise, never two sends closer than
// MinSpacing (waking does not cut that wait short). A post being sent when
// ctx ends is abandoned in flight and resumed on the next start.
func (o *Outbox) Run(ctx context.Context) error {
	storeFailures := 0
	for {
		res, err := o.step(ctx)
		if ctx.Err() != nil {
			return nil
		}
		var wait time.Duration
		switch {
		case err != nil && !errors.Is(err, ErrHeld):
			// The state file failed us (full disk, closed): try again
			// later, without sending anything meanwhile.
			storeFailures++
			wait = o.backoff(storeFailures)
			o.log.Error().Err(err).Dur("retryIn", wait).Msg("outbox: cannot read or write the state file")
		case res.progressed:
			storeFailures = 0
			continue
		case res.idle:
			storeFailures = 0
			wait = o.opts.Idle
		default: // held, or spaced from the last send
			storeFailures = 0
			wait = res.until.Sub(o.clock.Now())
			if wait <= 0 {
				continue
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-o.wake:
		case <-o.clock.After(wait):
		}
	}
}

// Flush delivers, in the caller's goroutine, every post that can be sent
// now, oldest first. It returns nil when the queue is empty, a *HeldError
// (errors.Is ErrHeld) when the oldest post must wait, or the error of the
// state file or of ctx. It never waits for a hold to pass: what is held stays
// in the state file for Run or the next start. At shutdown, call it with a
// deadline after Run has returned.
//
// Flush keeps MinSpacing between sends as Run does, waiting for it on the
// clock until ctx ends (then it returns ctx's error; nothing is in flight):
// GitHub's secondary limits do not care which loop sends. Unlike a hold, the
// spacing is short and known, so Flush waits rather than reports it: a
// shutdown flush with a deadline of a few seconds delivers a post a second
// until the deadline instead of stopping at the second post. With a fake
// clock, advance it while Flush waits, or set MinSpacing to NoSpacing.
func (o *Outbox) Flush(ctx context.Context) error {
	for {
		res, err := o.step(ctx)
		if err != nil {
			return err
		}
		if res.idle {
			return nil
		}
		if res.spaced {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-o.clock.After(res.until.Sub(o.clock.Now())):
			}
		}
	}
}

// stepResult is what one step did.
type stepResult struct {
	idle       bool      // nothing queued
	progressed bool      // a post left the queue, or its content moved on
	until      time.Time // held or spaced: when to look again
	spaced     bool      // due, but the last send was less than MinSpacing ago
}

// step handles the oldest entry once: it sends it unless it is held.
func (o *Outbox) step(ctx context.Context) (stepResult, error) {
	o.deliver.Lock()
	defer o.deliver.Unlock()
	if err := ctx.Err(); err != nil {
		return stepResult{}, err
	}
	now := o.clock.Now()
	var (
		seq         uint64
		rec         record
		found       bool
		wasInFlight bool
		held        *HeldError
		spaced      bool
	)
	next := o.lastSend.Add(o.opts.MinSpacing)
	err := o.store.UpdateIn(ctx, func(tx *state.Tx) error {
		e, ok, err := tx.OutboxFirst()
		if err != nil || !ok {
			return err
		}
		r, err := decodeRecord(e)
		if err != nil {
			// A record this build cannot read is a poison post too.
			o.log.Error().Err(err).Uint64("seq", e.Seq).Msg("outbox: dropped an unreadable post")
			o.countDrop("unknown", "unreadable")
			seq, found = e.Seq, false
			return tx.OutboxDelete(e.Seq)
		}
		seq, rec, found = e.Seq, r, true
		if r.NotBefore != 0 && now.Before(time.UnixMilli(r.NotBefore)) {
			held = &HeldError{Until: time.UnixMilli(r.NotBefore), Post: r.Post, Reason: r.LastError}
			return nil
		}
		if o.opts.MinSpacing > 0 && now.Before(next) {
			spaced = true
			return nil
		}
		wasInFlight = r.InFlight
		if r.InFlight {
			return nil
		}
		r.InFlight = true
		return tx.OutboxReplace(e.Seq, r.encode())
	})
	switch {
	case err != nil:
		return stepResult{}, err
	case !found && seq != 0:
		return stepResult{progressed: true}, nil
	case !found:
		o.count(func(s *Stats) { s.HeldUntil = time.Time{} })
		return stepResult{idle: true}, nil
	case held != nil:
		o.count(func(s *Stats) { s.HeldUntil = held.Until })
		return stepResult{until: held.Until}, held
	case spaced:
		return stepResult{until: next, spaced: true}, nil
	}

	// The post leaves only while this agent leads (an etcd store): the
	// write above was fenced by etcd, but a leader paused between it and
	// here must not post once another agent took over. The entry stays in
	// flight, and the leader that holds now settles it.
	if err := o.store.FencedIn(ctx); err != nil {
		return stepResult{}, err
	}
	p := rec.Post
	var sendErr error
	already := false
	if wasInFlight && p.Kind == KindStatus {
		already, sendErr = o.send.StatusIsLatest(ctx, p.SHA, p.Context, p.State, p.Description, p.TargetURL)
	}
	if sendErr == nil && !already {
		sendErr = o.post(ctx, p)
		// Spaced from the end of a send: the next write leaves at least
		// MinSpacing after GitHub answered this one.
		o.lastSend = o.clock.Now()
		if sendErr == nil && o.afterSend != nil && o.afterSend(p) {
			return stepResult{}, errCrashed
		}
	}
	if sendErr != nil {
		return o.failed(ctx, seq, rec, wasInFlight, sendErr)
	}
	return o.delivered(seq, rec, already)
}

// errCrashed is what a step returns when the test hook stopped it.
var errCrashed = errors.New("outbox: stopped after sending (test hook)")

func (o *Outbox) post(ctx context.Context, p Post) error {
	switch p.Kind {
	case KindStatus:
		return o.send.SetStatus(ctx, p.SHA, p.Context, p.State, p.Description, p.TargetURL)
	case KindSticky:
		return o.send.UpsertComment(ctx, p.PR, p.Marker, p.Body)
	case KindCheck:
		cs, ok := o.send.(CheckSender)
		if !ok {
			return errNoChecks
		}
		return cs.SetCheckRun(ctx, p.SHA, p.Context, p.State, p.Description, p.Body, p.Annotations)
	default:
		return o.send.AddCommentOnce(ctx, p.PR, p.Marker, p.Body)
	}
}

// delivered records that rec (as read) is on GitHub.
func (o *Outbox) delivered(seq uint64, sent record, already bool) (stepResult, error) {
	var rev int64
	err := o.store.Update(func(tx *state.Tx) error {
		tx.OnCommitAt(func(r int64) { rev = r })
		e, ok, err := tx.OutboxGet(seq)
		if err != nil || !ok {
			return err
		}
		cur, err := decodeRecord(e)
		if err != nil {
			return err
		}
		if cur.Rev == sent.Rev {
			return tx.OutboxDelete(seq)
		}
		// Coalesced while it was being sent: the newer content is not
		// on GitHub yet, and we know exactly what is, so it is no longer
		// in flight. It stays at the head and goes next.
		cur.InFlight, cur.Attempts, cur.AuthFailures, cur.LimitFailures, cur.NotBefore, cur.LastError = false, 0, 0, 0, 0, ""
		return tx.OutboxReplace(seq, cur.encode())
	})
	if err != nil {
		return stepResult{}, err
	}
	if sent.Post.Kind == KindStatus {
		o.rememberStatus(sent.Post)
	}
	now := o.clock.Now()
	o.count(func(s *Stats) {
		s.Delivered++
		s.LastDelivery = now
		s.HeldUntil = time.Time{}
	})
	ev := o.log.Debug().Str("post", sent.Post.String()).Int64("rev", rev)
	if already {
		ev = ev.Bool("alreadyLatest", true)
	}
	ev.Msg("outbox: delivered")
	return stepResult{progressed: true}, nil
}

// verdict is what to do about a failed send.
type verdict struct {
	drop bool
	// until is the hold, when not dropped.
	until time.Time
	// maybeDone: GitHub may have acted (no answer, 5xx); the post stays in
	// flight and a status is checked before it is sent again.
	maybeDone bool
	// auth: a credential failure (counted towards AuthAttempts).
	auth bool
	// limit: GitHub's content limit (counted towards ContentLimitAttempts).
	limit bool
	// reason is the word for the drop metric: the class, or "refused".
	reason string
}

type classed interface{ ClassName() string }

type retryable interface {
	Retryable() bool
	RetryAt(now time.Time) time.Time
}

// judge applies the error policy (see the package comment); attempts counts
// this failure, authFailures and limitFailures the credential and content
// limit failures before it.
func (o *Outbox) judge(err error, attempts, authFailures, limitFailures int, now time.Time) verdict {
	hold := now.Add(o.backoff(attempts))
	var re retryable
	if errors.As(err, &re) {
		if at := re.RetryAt(now); at.After(hold) {
			hold = at
		}
	}
	class := ""
	var ce classed
	if errors.As(err, &ce) {
		class = ce.ClassName()
	}
	switch class {
	case classUnauthorized, classCredentials:
		return verdict{drop: authFailures+1 >= o.opts.AuthAttempts, until: hold, auth: true, reason: class}
	case classContentLimit:
		// GitHub did not take it (a 422 creates nothing): not maybe done.
		return verdict{drop: limitFailures+1 >= o.opts.ContentLimitAttempts, until: hold, limit: true, reason: class}
	case classRateLimited, classSecondary:
		return verdict{until: hold}
	case classServer, classNetwork:
		return verdict{until: hold, maybeDone: true}
	case classForbidden, classNotFound, classValidation, classUnexpected:
		return verdict{drop: true, reason: class}
	}
	if re != nil && !re.Retryable() {
		return verdict{drop: true, reason: "refused"}
	}
	// Unknown: retryable, and maybe done.
	return verdict{until: hold, maybeDone: true}
}

// backoff is MinBackoff doubled for each failure after the first, capped;
// exact, since the hold it makes is persisted and shown.
func (o *Outbox) backoff(attempts int) time.Duration {
	return backoff.Wait(attempts, o.opts.MinBackoff, o.opts.MaxBackoff, nil)
}

// failed records a failed send of rec: a hold, or a drop.
func (o *Outbox) failed(ctx context.Context, seq uint64, sent record, wasInFlight bool, sendErr error) (stepResult, error) {
	if ctx.Err() != nil {
		// Stopped, not failed: the entry stays in flight as it is, and
		// is resumed (checked first) on the next step or start.
		return stepResult{}, ctx.Err()
	}
	now := o.clock.Now()
	v := o.judge(sendErr, sent.Attempts+1, sent.AuthFailures, sent.LimitFailures, now)
	msg := sendErr.Error()
	res := stepResult{progressed: true}
	var held *HeldError
	dropped := false
	noted := ""
	err := o.store.Update(func(tx *state.Tx) error {
		e, ok, err := tx.OutboxGet(seq)
		if err != nil || !ok {
			return err
		}
		cur, err := decodeRecord(e)
		if err != nil {
			return err
		}
		if v.drop {
			if cur.Rev == sent.Rev {
				if err := tx.OutboxDelete(seq); err != nil {
					return err
				}
				dropped = true
				noted, err = o.noteDrop(tx, cur, v.reason)
				return err
			}
			// The post was replaced while it failed; the new content
			// deserves its own try. What failed was refused, so
			// nothing of it reached GitHub.
			cur.InFlight, cur.Attempts, cur.AuthFailures, cur.LimitFailures, cur.NotBefore, cur.LastError = wasInFlight, 0, 0, 0, 0, msg
			return tx.OutboxReplace(seq, cur.encode())
		}
		cur.InFlight = wasInFlight || v.maybeDone
		cur.Attempts = sent.Attempts + 1
		if v.auth {
			cur.AuthFailures = sent.AuthFailures + 1
		}
		if v.limit {
			cur.LimitFailures = sent.LimitFailures + 1
		}
		cur.NotBefore = ceilMilli(v.until)
		cur.LastError = msg
		held = &HeldError{Until: time.UnixMilli(cur.NotBefore), Post: cur.Post, Reason: msg}
		return tx.OutboxReplace(seq, cur.encode())
	})
	if err != nil {
		return stepResult{}, err
	}
	o.count(func(s *Stats) {
		s.Failures++
		s.LastError, s.LastErrorAt = msg, now
		if held != nil {
			s.HeldUntil = held.Until
		}
	})
	if dropped {
		o.countDrop(string(sent.Post.Kind), v.reason)
		ev := o.log.Error().Str("post", sent.Post.String()).Str("kind", string(sent.Post.Kind)).Int("attempts", sent.Attempts+1).
			Str("class", v.reason).Str("reason", msg)
		switch {
		case noted != "":
			ev = ev.Str("noted", noted)
		case sent.Post.Kind != KindStatus:
			ev = ev.Str("noted", "no status was queued with this comment to carry the note")
		}
		ev.Msg("outbox: dropped a post GitHub will not take")
		return res, nil
	}
	if v.drop {
		o.log.Warn().Str("post", sent.Post.String()).Str("class", v.reason).Str("reason", msg).
			Msg("outbox: GitHub refused a version of a post replaced since; the newer one goes next")
		return res, nil
	}
	o.log.Warn().Str("post", sent.Post.String()).Int("attempts", sent.Attempts+1).Time("retryAt", v.until).
		Str("reason", msg).Msg("outbox: delivery failed; the queue waits")
	if held == nil { // the entry was gone
		return res, nil
	}
	return stepResult{until: held.Until}, held
}

// ceilMilli is t in Unix milliseconds, rounded up: a hold never ends before
// the moment GitHub named.
func ceilMilli(t time.Time) int64 {
	ms := t.UnixMilli()
	if time.UnixMilli(ms).Before(t) {
		ms++
	}
	return ms
}

func (o *Outbox) count(fn func(*Stats)) {
	o.mu.Lock()
	defer o.mu.Unlock()
	fn(&o.stats)
}

// dropKey counts drops by post kind and reason.
type dropKey struct{ kind, reason string }

// Drop is a count of posts dropped for good, by kind (status, sticky, once,
// unknown for a record that could not be read) and reason (the forge's class
// word: validation, not_found, forbidden, unauthorized, credentials,
// content_limited, unexpected; "refused" for another error that says it
// cannot succeed; "unreadable").
type Drop struct {
	Kind, Reason string
	Count        uint64
}

// Drops lists the drop counts since New, by kind then reason.
func (o *Outbox) Drops() []Drop {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := make([]Drop, 0, len(o.drops))
	for k, n := range o.drops {
		out = append(out, Drop{Kind: k.kind, Reason: k.reason, Count: n})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Kind != out[j].Kind {
			return out[i].Kind < out[j].Kind
		}
		return out[i].Reason < out[j].Reason
	})
	return out
}

// EachDrop calls fn with each drop count: the shape metrics.Outbox.Drops
// takes, so that the binary passes the method as it is.
func (o *Outbox) EachDrop(fn func(kind, reason string, n uint64)) {
	for _, d := range o.Drops() {
		fn(d.Kind, d.Reason, d.Count)
	}
}

func (o *Outbox) countDrop(kind, reason string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.stats.Dropped++
	o.drops[dropKey{kind, reason}]++
}

// lastStatusKeep bounds the statuses remembered for notes: a note is made
// right after its status was delivered, when the comment behind it fails.
const lastStatusKeep = 1024

func (o *Outbox) rememberStatus(p Post) {
	o.mu.Lock()
	defer o.mu.Unlock()
	k := p.Key()
	if _, ok := o.lastStatus[k]; !ok {
		o.lastOrder = append(o.lastOrder, k)
		if len(o.lastOrder) > lastStatusKeep {
			delete(o.lastStatus, o.lastOrder[0])
			o.lastOrder = o.lastOrder[1:]
		}
	}
	o.lastStatus[k] = p
}

func (o *Outbox) rememberedStatus(key string) (Post, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	p, ok := o.lastStatus[key]
	return p, ok
}

// noteDrop queues, in tx, the status that tells the reviewer the dropped
// comment rec was not posted (see "Nothing is dropped unsaid"). It returns
// what it noted on, "" when rec is a status or has no paired status.
func (o *Outbox) noteDrop(tx *state.Tx, rec record, reason string) (string, error) {
	if rec.Post.Kind == KindStatus || rec.Status == nil {
		return "", nil
	}
	base := *rec.Status
	key := base.Key()
	if last, ok := o.rememberedStatus(key); ok {
		base = last
	}
	note := base.String()
	queued, ok, err := tx.OutboxLookup(key)
	if err != nil {
		return "", err
	}
	if ok {
		cur, err := decodeRecord(queued)
		if err != nil {
			return "", err
		}
		if !strings.HasPrefix(cur.Post.Description, notePrefix) {
			cur.Post.Description = noteText(reason, cur.Post.Description)
			cur.Rev++
		}
		return cur.Post.String() + " (queued, amended)", tx.OutboxReplace(queued.Seq, cur.encode())
	}
	base.Description = noteText(reason, base.Description)
	_, err = tx.OutboxAppend(key, record{Post: base}.encode())
	return note, err
}

// notePrefix starts every note, so that a note is not noted twice.
const notePrefix = "comment not posted"

// maxDescription is GitHub's limit on a status description, in code points
// (the forge cuts too; the note is cut here so that its words come first).
const maxDescription = 140

// noteText is the description of a note: what happened, where to look, and
// the status's own description after it, cut to fit.
func noteText(reason, description string) string {
	why := map[string]string{
		classValidation:   "GitHub refused its content",
		classContentLimit: "GitHub kept limiting new content",
		classNotFound:     "the pull request was not found",
		classForbidden:    "no permission to comment",
		classUnauthorized: "GitHub refused the credential",
		classCredentials:  "the credential did not resolve",
	}[reason]
	if why == "" {
		why = "GitHub refused it"
	}
	s := notePrefix + " (" + why + "); see the fleet-agent log"
	if description == "" {
		return s
	}
	s += " · "
	// The note's own words always fit; the status's description gets the
	// code points left, and an ellipsis when it loses some.
	room := maxDescription - utf8.RuneCountInString(s)
	if d := []rune(description); len(d) > room {
		return s + string(d[:room-1]) + "…"
	}
	return s + description
}
