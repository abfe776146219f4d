// Package livecheck is the live checks of a plan (docs/plan-format.md
// and 5): it answers plan.Live and apply.Checker by asking the provider
// adapters the binary opened.
//
// For one plan:
//
//   - every provider account whose provider has an adapter verifies its
//     credentials once (the answer is kept for the rest of the plan);
//   - every pool's policy.substrate is checked against its account's
//     provider: the cluster's location exists and is of a kind the provider
//     puts clusters in, each flavor's machine type exists there with the
//     GPUs the flavor says, its zones are zones of the cluster's region,
//     zeroNodes, spot and diskGiB fit the provider's rules, an adopted
//     cluster exists, and no other pool claims it (by account and adopted
//     id, or by the provider-global id read in this plan);
//   - before an apply writes anything, CheckCall verifies again, for each
//     call that creates or updates a provider account or a pool with a
//     substrate, that the account's secret references resolve and its
//     credentials are accepted.
//
// A check that fails because of what is written (Invalid, NotFound,
// Terminal) is a reason that blocks the change, worded for the reviewer. A
// provider that does not answer in time or asks to wait (Unavailable,
// Throttled, Conflict, Unknown, or our own deadline) is an error: plan.Gather
// turns it into UNAVAILABLE, and apply into UNAVAILABLE too.
//
// A provider with no adapter in Options.Adapters (aws, gcp and digitalocean
// in this build, any provider id the binary does not know, or a provider
// the agent config has no `providers.<id>` block for: the binary opens only
// the adapters it has a block for, so `--state` alone checks everything
// offline) answers Verdict{Offline: true}, and the plan notes its changes
// `not checked live`.
//
// A Checker holds what one plan learned (verified accounts, substrate
// verdicts, clusters and their global ids, and a provider that did not
// answer): the apply that follows the plan gathers the same facts, and only
// CheckCall asks again. Make a new one per plan (and to try again after
// UNAVAILABLE) with Fresh. Secret values are
// resolved at the moment of use by the adapters and by CheckCall, and never
// kept: no verdict, error or log line carries one (Options.Redactor masks
// every value the resolver has seen, as a second line of defence).
//
// livecheck imports only the provider boundary (internal/providers), never
// an adapter: the binary passes the adapters in.
package livecheck

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/fleet-agent/fleet-agent/internal/inventory"
	"github.com/fleet-agent/fleet-agent/internal/plan"
	"github.com/fleet-agent/fleet-agent/internal/providers"
	"github.com/fleet-agent/fleet-agent/internal/refusal"
	"github.com/fleet-agent/fleet-agent/internal/secrets"
)

// DefaultTimeout is the deadline of one provider call when Options says none.
const DefaultTimeout = 20 * time.Second

// Adapter is what the live checks ask of a provider: credentials, the
// catalogue (its Kubernetes versions included) and its rules, and a read
// of an adoptable cluster. Every providers.Kubernetes satisfies it.
type Adapter interface {
	providers.Verifier
	providers.Catalog
	ReadAdoptable(ctx context.Context, acct providers.Account, adoptID string) (providers.Cluster, error)
}

// Options configure the live checks.
type Options struct {
	// Adapters are the opened adapters by provider id. A provider without
	// one is checked offline.
	Adapters map[string]Adapter
	// Secrets resolves the references of an account's config in CheckCall.
	// nil leaves resolution to the adapter's Verify.
	Secrets providers.SecretResolver
	// Timeout bounds each provider call; 0 is DefaultTimeout.
	Timeout time.Duration
	// Redactor, when set, masks every value it knows in verdicts and errors.
	Redactor *secrets.Redactor
	// Logger gets one debug line per provider call; nil logs nothing.
	Logger *zerolog.Logger
}

// Checker is the live checks of one plan and the apply that follows it.
// It satisfies plan.Checks (and, through For, plan.Source). It is safe for
// concurrent use.
type Checker struct {
	opts Options
	log  zerolog.Logger

	mu sync.Mutex
	// accounts seen by CheckAccount and CheckSubstrate, by name: what
	// CheckCall verifies again.
	accounts map[string]plan.Account
	// poolAccounts is the substrate account of each pool checked.
	poolAccounts map[string]string
	// verified caches Verify per account (key of accountKey) for the plan.
	verified map[string]outcome
	// preflight caches CheckCall's verification per account for the apply.
	preflight map[string]error
	// substrates caches each substrate's verdict (or error) for the plan,
	// so that apply's own gathering sees what the reviewed plan saw.
	substrates map[string]substrateResult
	// adopted caches ReadAdoptable per account key and adopt id.
	adopted map[string]adoptRead
	// claims are the clusters claimed in this plan, by global id.
	claims map[string]claim
	// snap is the fleet, for the claims of its pools (WithFleet).
	snap *inventory.Snapshot
}

// outcome is a cached answer: a reason that blocks, or an error.
type outcome struct {
	blocked string
	err     error
}

type adoptRead struct {
	cluster providers.Cluster
	err     error
}

type claim struct {
	pool, account, adopt string
}

var _ plan.Live = (*Checker)(nil)

// New returns the live checks of one plan over the given adapters.
func New(opts Options) *Checker {
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultTimeout
	}
	c := &Checker{opts: opts, log: zerolog.Nop()}
	if opts.Logger != nil {
		c.log = *opts.Logger
	}
	c.reset()
	return c
}

func (c *Checker) reset() {
	c.accounts = map[string]plan.Account{}
	c.poolAccounts = map[string]string{}
	c.verified = map[string]outcome{}
	c.preflight = map[string]error{}
	c.adopted = map[string]adoptRead{}
	c.substrates = map[string]substrateResult{}
	c.claims = map[string]claim{}
	c.snap = nil
}

// Fresh returns a Checker over the same adapters and options with nothing
// learned yet: the one for the next plan.
func (c *Checker) Fresh() *Checker { return New(c.opts) }

// For makes the checks of one plan against the fleet snap: a Checker is
// also the plan.Source its plans draw from, opened once with the adapters.
func (c *Checker) For(snap *inventory.Snapshot) plan.Checks { return c.Fresh().WithFleet(snap) }

var _ plan.Source = (*Checker)(nil)

// WithFleet tells the checks which fleet the plan is made against, so that
// a pool of the fleet that adopted a cluster through another account claims
// it too (its global id is read with its own account where it has an
// adapter). It returns c.
func (c *Checker) WithFleet(snap *inventory.Snapshot) *Checker {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.snap = snap
	return c
}

// CheckAccount verifies the account's credentials (once per plan).
func (c *Checker) CheckAccount(ctx context.Context, acc plan.Account) (plan.Verdict, error) {
	c.remember(acc)
	ad := c.opts.Adapters[acc.Provider]
	if ad == nil {
		return plan.Verdict{Offline: true}, nil
	}
	o := c.verify(ctx, ad, acc)
	if o.err != nil {
		return plan.Verdict{}, o.err
	}
	if o.blocked != "" {
		return plan.Verdict{Blocked: []string{o.blocked}}, nil
	}
	return plan.Verdict{}, nil
}

func (c *Checker) remember(acc plan.Account) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.accounts[acc.Name] = acc
}

func accountKey(acc plan.Account) string {
	return acc.Provider + "\x00" + acc.Name + "\x00" + string(acc.Config)
}

func toProviders(acc plan.Account) providers.Account {
	return providers.Account{Name: acc.Name, Provider: acc.Provider, Config: acc.Config}
}

// verify asks the adapter once per plan whether the account's credentials
// work.
func (c *Checker) verify(ctx context.Context, ad Adapter, acc plan.Account) outcome {
	key := accountKey(acc)
	c.mu.Lock()
	o, ok := c.verified[key]
	c.mu.Unlock()
	if ok {
		return o
	}
	err := c.call(ctx, acc, "Verify", func(ctx context.Context) error { return ad.Verify(ctx, toProviders(acc)) })
	switch {
	case err == nil:
	case transient(err):
		o.err = c.unreachable(acc, err)
	default:
		o.blocked = c.redact(accountReason(err))
	}
	c.mu.Lock()
	c.verified[key] = o
	c.mu.Unlock()
	return o
}

// accountReason words a refused verification for the reviewer.
func accountReason(err error) string {
	switch providers.ReasonOf(err) {
	case "credentialsRefused":
		return fmt.Sprintf("credentials refused: %v; fix the account's credentials", err)
	case "secretMissing":
		return fmt.Sprintf("a secret reference of the account does not resolve: %v; store the secret or fix the reference", err)
	}
	switch providers.ClassOf(err) {
	case providers.Invalid:
		return fmt.Sprintf("the provider refuses the account's config: %v", err)
	case providers.NotFound:
		return fmt.Sprintf("the provider does not know the account: %v", err)
	}
	return fmt.Sprintf("the provider refuses the account: %v", err)
}

// transient reports whether a failure says nothing about the document: the
// provider was not reached, asked us to wait, was busy, or did not answer
// in time.
func transient(err error) bool {
	switch providers.ClassOf(err) {
	case providers.Unavailable, providers.Throttled, providers.Conflict, providers.Unknown:
		return true
	}
	return false
}

// call makes one provider call with the deadline, and logs it.
func (c *Checker) call(ctx context.Context, acc plan.Account, method string, f func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, c.opts.Timeout)
	defer cancel()
	start := time.Now()
	err := f(ctx)
	if err != nil && ctx.Err() != nil && providers.ClassOf(err) != providers.Unavailable {
		// Our deadline, whatever the adapter made of it.
		err = &providers.Error{Op: method, Class: providers.Unavailable, SideEffect: providers.None,
			Message: fmt.Sprintf("no answer within %s", c.opts.Timeout), Err: err}
	}
	ev := c.log.Debug().Str("provider", acc.Provider).Str("account", acc.Name).Str("call", method).Dur("took", time.Since(start))
	if err != nil {
		ev = ev.Str("class", string(providers.ClassOf(err))).Str("error", c.redact(err.Error()))
	}
	ev.Msg("live check")
	return err
}

// unreachable is the error of a provider that could not be reached; Gather
// makes it UNAVAILABLE.
func (c *Checker) unreachable(acc plan.Account, err error) error {
	msg := fmt.Sprintf("provider account %q (%s): %v", acc.Name, acc.Provider, err)
	if ra := providers.RetryAfterOf(err); ra > 0 {
		msg += fmt.Sprintf(" (retry after %s)", ra)
	}
	return &checkError{msg: c.redact(msg), code: refusal.Unavailable, err: err}
}

func (c *Checker) redact(s string) string {
	if c.opts.Redactor == nil {
		return s
	}
	return c.opts.Redactor.Redact(s)
}

// checkError is an error whose text is its message alone (redacted), so
// that the refusal that wraps it does not repeat a code, while errors.As
// still finds its refusal code and the provider error underneath.
type checkError struct {
	msg  string
	code refusal.Code
	err  error
}

func (e *checkError) Error() string { return e.msg }

// Unwrap gives the refusal (for refusal.CodeOf) and the provider error (for
// providers.ClassOf).
func (e *checkError) Unwrap() []error {
	return []error{&refusal.Error{Code: e.code, Message: e.msg}, e.err}
}
