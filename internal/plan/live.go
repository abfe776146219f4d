package plan

import (
	"context"
	"encoding/json"
	"errors"
	"sort"

	"github.com/fleet-agent/fleet-agent/internal/fleet"
	"github.com/fleet-agent/fleet-agent/internal/inventory"
	"github.com/fleet-agent/fleet-agent/internal/refusal"
)

// NoteNotChecked marks a change whose provider was not asked.
const NoteNotChecked = "not checked live"

// Account is a provider account as a live check sees it.
type Account struct {
	Name     string
	Provider string
	// Config is the account's config (secret fields are references).
	Config json.RawMessage
}

// Verdict is what the live world says of one account or one substrate.
type Verdict struct {
	// Offline: no adapter was asked (none in this build, or --offline).
	Offline bool
	// Blocked are reasons that block the change.
	Blocked []string
	// Notes are shown to the reviewer.
	Notes []string
	// ClusterVersion is the Kubernetes version an adopted cluster runs, as
	// the check read it ("" when not read): the plan shows it on a change
	// of the pool, never compares it (an adopted cluster's version is its
	// owner's).
	ClusterVersion string
}

// Live is what a plan asks of the live world. The provider registry
// satisfies it; Offline answers without asking anyone. An error means the
// provider could not be reached: the plan is then an error (UNAVAILABLE),
// not a blocked plan.
type Live interface {
	CheckAccount(ctx context.Context, acc Account) (Verdict, error)
	CheckSubstrate(ctx context.Context, pool string, sub *fleet.Substrate, acc Account) (Verdict, error)
}

// Checks are the live checks of one plan and of the apply that follows it:
// what the plan asks (Live), and the apply's preflight of each call before
// anything is written (credentials that work, a secret that resolves). A
// check remembers what it learned for its one plan, so the apply sees what
// the reviewed plan saw.
type Checks interface {
	Live
	CheckCall(ctx context.Context, call Call) error
}

// Source makes the checks of one plan against the fleet it is planned
// against (the fleet's own pools claim clusters too). It is opened once,
// with the provider adapters, and asked for new checks per plan.
type Source interface {
	For(snap *inventory.Snapshot) Checks
}

// OfflineSource is the Source of a build or a config without adapters, and
// of --offline.
type OfflineSource struct{}

// For answers offline checks.
func (OfflineSource) For(*inventory.Snapshot) Checks { return Offline{} }

// Offline is the Live of a plan with no provider adapters (or --offline).
type Offline struct{}

// CheckCall decides nothing: without adapters nobody can be asked.
func (Offline) CheckCall(context.Context, Call) error { return nil }

// CheckAccount answers offline.
func (Offline) CheckAccount(context.Context, Account) (Verdict, error) {
	return Verdict{Offline: true}, nil
}

// CheckSubstrate answers offline.
func (Offline) CheckSubstrate(context.Context, string, *fleet.Substrate, Account) (Verdict, error) {
	return Verdict{Offline: true}, nil
}

// Facts are the live verdicts gathered for one plan, by account name and by
// pool name.
type Facts struct {
	Accounts   map[string]Verdict
	Substrates map[string]Verdict
}

// For is the one way a plan is made: it asks the live checks about every
// account and substrate of the document (Gather), then diffs the document
// against the snapshot (Make). The agent, the apply, drift checks, the
// local API and the command line all plan through it, so they see the
// fleet the same way. live nil plans offline.
func For(ctx context.Context, doc *fleet.Document, snap *inventory.Snapshot, live Live, opts Options) (*Plan, error) {
	facts, err := Gather(ctx, doc, snap, live)
	if err != nil {
		return nil, err
	}
	opts.Facts = facts
	return Make(doc, snap, opts), nil
}

// Again plans doc against another snapshot with the options and live facts
// p was made with, calling nobody: what an apply does inside its write
// transaction when the fleet moved since its plan.
func Again(p *Plan, doc *fleet.Document, snap *inventory.Snapshot) *Plan {
	return Make(doc, snap, p.opts)
}

// Gather asks the live world about every account and substrate of the
// document, once each. It is called before Make, outside any transaction.
func Gather(ctx context.Context, doc *fleet.Document, snap *inventory.Snapshot, live Live) (*Facts, error) {
	if live == nil {
		live = Offline{}
	}
	f := &Facts{Accounts: map[string]Verdict{}, Substrates: map[string]Verdict{}}
	accounts := map[string]Account{}
	for _, a := range doc.ProviderAccounts {
		cfg, _ := json.Marshal(a.Config)
		accounts[a.Name] = Account{Name: a.Name, Provider: a.Provider, Config: cfg}
	}
	lookup := func(name string) (Account, bool) {
		if a, ok := accounts[name]; ok {
			return a, true
		}
		if o, ok := snap.ByName(inventory.ProviderAccount, name); ok {
			p, _ := o.Spec["provider"].(string)
			cfg, _ := json.Marshal(o.Spec["config"])
			return Account{Name: name, Provider: p, Config: cfg}, true
		}
		return Account{}, false
	}
	var errs []error
	names := make([]string, 0, len(accounts))
	for n := range accounts {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		v, err := live.CheckAccount(ctx, accounts[n])
		if err != nil {
			errs = append(errs, err)
			continue
		}
		f.Accounts[n] = v
	}
	for _, p := range doc.Pools {
		sub := p.Substrate()
		if sub == nil {
			continue
		}
		acc, ok := lookup(sub.Account)
		if !ok {
			continue // the plan blocks an unknown account by itself
		}
		v, err := live.CheckSubstrate(ctx, p.Name, sub, acc)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		f.Substrates[p.Name] = v
	}
	if len(errs) > 0 {
		return nil, refusal.Wrap(refusal.Unavailable, errors.Join(errs...), "a provider could not be reached; the plan was not made (try again, or plan with --offline)")
	}
	return f, nil
}
