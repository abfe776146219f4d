// Package agent is the loop: it polls the repository, plans every proposal
// (a pull request head, or without GitHub any other branch) and posts the
// plan, applies each new tip of the branch under the trust rules, and
// serves the local API the command line uses while it runs.
//
// It declares what it needs of GitHub (Forge) and of the outbox (Outbox);
// the binary passes the implementations in, so this package never reaches
// go-github or a cloud SDK.
package agent

import (
	"context"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/fleet-agent/fleet-agent/internal/clock"
	"github.com/fleet-agent/fleet-agent/internal/fleet"
	"github.com/fleet-agent/fleet-agent/internal/gitsync"
	"github.com/fleet-agent/fleet-agent/internal/inventory"
	"github.com/fleet-agent/fleet-agent/internal/localapi"
	"github.com/fleet-agent/fleet-agent/internal/outbox"
	"github.com/fleet-agent/fleet-agent/internal/plan"
	"github.com/fleet-agent/fleet-agent/internal/refs"
	"github.com/fleet-agent/fleet-agent/internal/state"
	"github.com/fleet-agent/fleet-agent/internal/webhooks"
)

// PullRequest is what the agent knows of a pull request.
type PullRequest struct {
	Number         int
	HeadSHA        string
	HeadRef        string
	Author         string
	Merged         bool
	MergeCommitSHA string
}

// Forge is what the agent asks of GitHub. Reads only: every post goes
// through the Outbox.
type Forge interface {
	// OpenPullRequests lists the open pull requests into base; an idle
	// poll must cost no rate limit (a conditional request answered 304).
	OpenPullRequests(ctx context.Context, base string) ([]PullRequest, error)
	// MergedPullRequest finds the pull request that merged sha.
	MergedPullRequest(ctx context.Context, sha string) (PullRequest, bool, error)
}

// Outbox queues posts inside the caller's transaction; they are delivered
// later, in order, and survive a restart. *outbox.Outbox satisfies it.
type Outbox interface {
	Enqueue(tx *state.Tx, p outbox.Post) error
}

// Config is what the agent follows and how.
type Config struct {
	Tenant string
	// Branch is the only branch ever applied; Path the document in it.
	Branch, Path string
	Interval     time.Duration
	Prune        bool
	// MaxTeardowns is how many substrates one plan may tear down
	// (apply.maxTeardowns); nil is plan.DefaultMaxTeardowns.
	MaxTeardowns *int
	// RequireReviewedPlan: the tip's plan must be the one recorded for the
	// head that was reviewed.
	RequireReviewedPlan bool
	// Verify: only signed commits are applied.
	Verify bool
	// Prefix is the status context prefix and the comment marker's name
	// (github.statusContext, default fleet-agent).
	Prefix string
	// DriftEvery is how often the applied document is planned again.
	DriftEvery time.Duration
	// Heal re-applies the applied document when it drifts.
	Heal bool
	// DriftPullRequests proposes each drift on a branch of the agent's own
	// (driftpr.go); RevertOnClose re-applies when it is closed unmerged.
	DriftPullRequests, RevertOnClose bool
	// Repository is the followed repository as people may see it (no
	// credentials): the local API names it in its refusals.
	Repository string
	// PolicyPath is the policy file (docs/policy.md), read at the applied
	// commit; "" for none.
	PolicyPath string
	// Checks: post a check run beside every status (checks.go). Only a
	// GitHub App may (github.app); with a token the agent posts statuses.
	Checks bool
	// Warnings are shown by status as they are: what the agent's own
	// set-up leaves exposed (a listener opted in off loopback).
	Warnings []string
}

// Agent is one running agent.
type Agent struct {
	cfg    Config
	store  *state.Store
	repo   *gitsync.Repo
	forge  Forge  // nil without github
	outbox Outbox // nil without github
	events Events // nil without webhooks
	hooks  []webhooks.Hook
	live   plan.Source
	clock  clock.Clock
	log    zerolog.Logger

	// driftForge opens drift pull requests; nil without github.
	driftForge DriftForge

	// applyMu makes applies one at a time: the loop's and the local API's.
	applyMu sync.Mutex
	// tickMu holds a whole iteration, so a reload never changes the config
	// under a running step.
	tickMu sync.Mutex
	waker  waker

	mu        sync.Mutex
	prs       []PullRequest // the last good list
	lastPoll  time.Time
	lastDrift time.Time

	lastHousekeeping time.Time
	seen             map[string]time.Time // tips, when first seen (MergeLinkGrace)
	lastError        error
	mergedTip        string          // the tip mergedHeads was computed for
	mergedHeads      map[string]bool // branch heads already in that tip
	hostileRefs      map[string]bool // branches not planned for their names, logged once
	ticks            int
	metrics          Metrics
	substrates       Waker

	// policyMu guards policy, the policy in use (policy.go).
	policyMu sync.Mutex
	policy   policyState
	// proposed judges the policies pull requests propose (proposed.go).
	proposed proposedJudge
}

// Options wire an agent.
type Options struct {
	Store  *state.Store
	Repo   *gitsync.Repo
	Forge  Forge
	Outbox Outbox
	// Live gives the live checks of each plan (and of the apply that
	// follows it), opened once with the provider adapters; nil plans
	// offline.
	Live    plan.Source
	Clock   clock.Clock
	Log     zerolog.Logger
	Metrics Metrics
	// Substrates is woken after every apply, so a substrate the apply
	// recorded converges at once; nil without a reconciler.
	Substrates Waker
	// DriftForge opens drift pull requests (drift.pullRequests); nil
	// without github, where the pushed branch is the proposal.
	DriftForge DriftForge
	// Events queues events for events.webhooks; nil without webhooks.
	Events Events
	// Hooks are the webhooks whose deliveries status shows.
	Hooks []webhooks.Hook
}

// Waker is what the agent asks of the substrate reconciler: to run now.
type Waker interface{ Wake() }

// New makes an agent.
func New(cfg Config, o Options) *Agent {
	if cfg.Tenant == "" {
		cfg.Tenant = "root"
	}
	if cfg.Branch == "" {
		cfg.Branch = "main"
	}
	if cfg.Path == "" {
		cfg.Path = "fleet.json"
	}
	if cfg.Prefix == "" {
		cfg.Prefix = "fleet-agent"
	}
	if o.Clock == nil {
		o.Clock = clock.Real{}
	}
	if o.Live == nil {
		o.Live = plan.OfflineSource{}
	}
	if o.Metrics == nil {
		o.Metrics = nopMetrics{}
	}
	a := &Agent{cfg: cfg, store: o.Store, repo: o.Repo, forge: o.Forge, outbox: o.Outbox, live: o.Live,
		clock: o.Clock, log: o.Log, metrics: o.Metrics, substrates: o.Substrates, driftForge: o.DriftForge, events: o.Events, hooks: o.Hooks}
	if a.forge == nil {
		// Without GitHub every other branch is a proposal.
		a.repo.SetWant(gitsync.Patterns("refs/heads/*"))
	}
	return a
}

// ForgeTimeout bounds each GitHub read of a step.
const ForgeTimeout = 30 * time.Second

// Records kept in the state's kv space.
const (
	spaceReviewed  = "reviewed"  // head commit -> reviewed plan
	spaceProposals = "proposals" // ref -> proposal
	spaceRefused   = "refused"   // commit -> why it was not applied
	spaceAgent     = "agent"     // cursors
	spacePending   = "pending"   // commit -> apply status pending, not yet resolved
)

// Reviewed is the plan recorded for a proposal's head: what "reviewed"
// means for requireReviewedPlan.
type Reviewed struct {
	Head     string `json:"head"`
	PlanHash string `json:"planHash"`
	PR       int    `json:"pr,omitempty"`
	Ref      string `json:"ref,omitempty"`
	At       int64  `json:"at"`
	Valid    bool   `json:"valid"`
}

// stored is Proposal with its bookkeeping fields kept.
type storedProposal struct {
	localapi.Proposal
	Tip     string `json:"tip"`
	Applied string `json:"applied"`
	PR      int    `json:"pr,omitempty"`
	// Lines are the plan's text lines, for the page (status leaves them
	// out); a proposal planned before they were kept has none.
	Lines []string `json:"lines,omitempty"`
	// Awaiting: a policy approve rule waited for an approval; the proposal
	// is judged again every poll until one is given.
	Awaiting bool `json:"awaiting,omitempty"`
	// ReviewBound: a policy approve rule matched the plan, met or not: its
	// verdict follows the reviews (submitted, dismissed, changed) and team
	// membership, so the proposal is judged again every poll.
	ReviewBound bool `json:"reviewBound,omitempty"`
	// PolicyPending: what the policy the proposal proposes would say was
	// still being worked out; it is planned again until that is in.
	PolicyPending bool `json:"policyPending,omitempty"`
}

// Tick is one iteration: poll, apply the tip, plan the proposals.
func (a *Agent) Tick(ctx context.Context) error {
	a.tickMu.Lock()
	defer a.tickMu.Unlock()
	a.mu.Lock()
	a.ticks++
	a.mu.Unlock()
	var prs []PullRequest
	if a.forge != nil {
		// Plans never wait on GitHub: a slow answer is given up on and the
		// last list used.
		fctx, cancel := context.WithTimeout(ctx, ForgeTimeout)
		list, err := a.forge.OpenPullRequests(fctx, a.cfg.Branch)
		cancel()
		a.mu.Lock()
		if err != nil {
			// Keep planning what we knew; GitHub's outage shows in metrics.
			a.log.Warn().Err(err).Msg("cannot list open pull requests; using the last list")
			a.metrics.ForgeError()
			list = a.prs
		} else {
			a.prs = list
		}
		a.mu.Unlock()
		prs = list
		want := map[string]bool{}
		for _, pr := range prs {
			want[refs.PullHead(pr.Number)] = true
		}
		// And the merge queue's entries for the branch, planned like pull
		// request heads (queue.go).
		queue := refs.QueuePrefix(a.cfg.Branch)
		a.repo.SetWant(func(ref string) bool { return want[ref] || strings.HasPrefix(ref, queue) })
	}
	start := a.clock.Now()
	snap, err := a.repo.Poll(ctx)
	a.metrics.Poll(err, a.clock.Now().Sub(start), snap.Fetched)
	a.mu.Lock()
	if err != nil {
		a.lastError = err
	} else {
		a.lastPoll, a.lastError = a.clock.Now(), nil
	}
	a.mu.Unlock()
	if err != nil {
		a.log.Warn().Err(err).Msg("poll failed; the last good state is kept")
		if snap.Tip == "" {
			return err
		}
	}
	if snap.Tip != "" {
		if err := a.applyTip(ctx, snap.Tip); err != nil {
			a.log.Warn().Err(err).Str("commit", snap.Tip).Msg("the tip was not applied this time")
		}
	}
	a.planProposals(ctx, snap, prs)
	a.maybeDrift(ctx)
	a.housekeep(snap.Tip)
	return err
}

// Reconfigure changes what can change while the agent runs (apply and
// drift settings). It waits for the current step to finish.
func (a *Agent) Reconfigure(change func(*Config)) {
	a.tickMu.Lock()
	defer a.tickMu.Unlock()
	a.applyMu.Lock()
	defer a.applyMu.Unlock()
	// The local API plans without tickMu: it reads prune under mu.
	a.mu.Lock()
	defer a.mu.Unlock()
	change(&a.cfg)
}

// LastPoll is when a poll last succeeded.
func (a *Agent) LastPoll() time.Time {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.lastPoll
}

func (a *Agent) applied() (*state.Applied, error) {
	var ap *state.Applied
	err := a.store.View(func(tx *state.Tx) (err error) { ap, err = tx.Applied(); return })
	return ap, err
}

// readDocument reads and validates the document at a commit.
func (a *Agent) readDocument(commit string) (*fleet.Document, fleet.Errors, error) {
	data, err := a.repo.ReadFile(commit, a.cfg.Path)
	if err != nil {
		return nil, nil, err
	}
	doc, errs := fleet.Validate(a.cfg.Path, data)
	return doc, errs, nil
}

// planned is a plan with the live checks it was made with, which the apply
// that follows it reuses (so it sees what the plan saw).
type planned struct {
	*plan.Plan
	checks plan.Checks
	snap   *inventory.Snapshot // what it was planned against (the policy's before)
}

// planHow says how a plan is made: with the agent's prune, or the one a
// caller of the local API asked for; live, or offline.
type planHow struct {
	prune   *bool
	offline bool
}

// makePlan plans doc against the fleet with fresh live checks: the one
// place the agent plans (proposals, tips, drift, the local API).
func (a *Agent) makePlan(ctx context.Context, doc *fleet.Document, how planHow) (planned, error) {
	snap, err := a.store.Snapshot()
	if err != nil {
		return planned{}, err
	}
	return a.planAgainst(ctx, doc, snap, how)
}

func (a *Agent) planAgainst(ctx context.Context, doc *fleet.Document, snap *inventory.Snapshot, how planHow) (planned, error) {
	var checks plan.Checks = plan.Offline{}
	if !how.offline {
		checks = a.live.For(snap)
	}
	a.mu.Lock()
	prune, teardowns := a.cfg.Prune, a.cfg.MaxTeardowns
	a.mu.Unlock()
	if how.prune != nil {
		prune = *how.prune
	}
	start := a.clock.Now()
	p, err := plan.For(ctx, doc, snap, checks, plan.Options{Tenant: a.cfg.Tenant, Prune: prune, MaxTeardowns: teardowns})
	a.metrics.Plan(err, a.clock.Now().Sub(start))
	if err != nil {
		return planned{}, err
	}
	return planned{Plan: p, checks: checks, snap: snap}, nil
}

// wakeSubstrates tells the reconciler an apply happened.
func (a *Agent) wakeSubstrates() {
	if a.substrates != nil {
		a.substrates.Wake()
	}
}

// enqueue posts inside tx when GitHub is configured.
func (a *Agent) enqueue(tx *state.Tx, posts ...outbox.Post) error {
	if a.outbox == nil {
		return nil
	}
	for _, p := range a.withChecks(posts) {
		if err := a.outbox.Enqueue(tx, p); err != nil {
			return err
		}
	}
	return nil
}
