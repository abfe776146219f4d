package livecheck

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/fleet-agent/fleet-agent/internal/inventory"
	"github.com/fleet-agent/fleet-agent/internal/plan"
	"github.com/fleet-agent/fleet-agent/internal/refusal"
	"github.com/fleet-agent/fleet-agent/internal/secrets"
)

// CheckCall is apply's preflight: before anything is written, a call that
// creates or updates a provider account, or a pool with a substrate,
// verifies again (once per account and apply) that the account's secret
// references resolve and that its credentials are accepted. Other calls,
// and accounts of a provider checked offline, pass.
//
// The account is the one this Checker saw while the plan was gathered (an
// account created by the call is taken from the call itself). A failure is
// an error whose refusal code is UNAVAILABLE when the provider or a secret
// store could not be reached, else INVALID_STATE.
func (c *Checker) CheckCall(ctx context.Context, call plan.Call) error {
	name := ""
	switch call.Kind() {
	case inventory.ProviderAccount:
		if call.Method != "providerAccounts.create" && call.Method != "providerAccounts.update" {
			return nil
		}
		name = call.Name()
	case inventory.Pool:
		if call.Method != "pools.create" && call.Method != "pools.update" {
			return nil
		}
		if pol, ok := call.Params["policy"].(map[string]any); ok {
			sub, _ := pol["substrate"].(map[string]any)
			name, _ = sub["account"].(string)
		} else {
			c.mu.Lock()
			name = c.poolAccounts[call.Name()]
			c.mu.Unlock()
		}
	default:
		return nil
	}
	if name == "" {
		return nil // no substrate: nothing at a provider
	}
	acc, ok := c.accountNamed(name)
	if !ok && call.Kind() == inventory.ProviderAccount {
		p, _ := call.Params["provider"].(string)
		cfg, _ := json.Marshal(call.Params["config"])
		acc, ok = plan.Account{Name: name, Provider: p, Config: cfg}, p != ""
	}
	if !ok {
		return &checkError{code: refusal.InvalidState, msg: fmt.Sprintf("provider account %q was not part of this plan's live checks; plan again", name)}
	}
	ad := c.opts.Adapters[acc.Provider]
	if ad == nil {
		return nil // checked offline
	}
	key := accountKey(acc)
	c.mu.Lock()
	err, done := c.preflight[key]
	c.mu.Unlock()
	if !done {
		err = c.preflightAccount(ctx, ad, acc)
		c.mu.Lock()
		c.preflight[key] = err
		c.mu.Unlock()
	}
	return err
}

// preflightAccount resolves every secret reference of the account's config
// (and forgets the values) and verifies its credentials.
func (c *Checker) preflightAccount(ctx context.Context, ad Adapter, acc plan.Account) error {
	if c.opts.Secrets != nil {
		var cfg any
		if len(acc.Config) > 0 {
			if err := json.Unmarshal(acc.Config, &cfg); err != nil {
				return &checkError{code: refusal.InvalidState, msg: fmt.Sprintf("provider account %q: its config cannot be read", acc.Name), err: err}
			}
		}
		for _, ref := range refs(cfg, nil) {
			if _, err := c.opts.Secrets.Resolve(ctx, ref); err != nil {
				code := refusal.InvalidState
				if refusal.CodeOf(err) == refusal.Unavailable {
					code = refusal.Unavailable
				}
				msg := fmt.Sprintf("provider account %q: a secret reference does not resolve: %s", acc.Name, messageOf(err))
				return &checkError{code: code, msg: c.redact(msg), err: err}
			}
		}
	}
	err := c.call(ctx, acc, "Verify", func(ctx context.Context) error { return ad.Verify(ctx, toProviders(acc)) })
	switch {
	case err == nil:
		return nil
	case transient(err):
		return c.unreachable(acc, err)
	}
	msg := fmt.Sprintf("provider account %q (%s): %s", acc.Name, acc.Provider, accountReason(err))
	return &checkError{code: refusal.InvalidState, msg: c.redact(msg), err: err}
}

// messageOf is a refusal's message without its code, or the error's text.
func messageOf(err error) string {
	if r, ok := err.(*refusal.Error); ok {
		return r.Message
	}
	return err.Error()
}

// refs lists the secret references in a config, at every depth, sorted and
// without repeats.
func refs(v any, out []string) []string {
	switch x := v.(type) {
	case string:
		if secrets.LooksLikeRef(x) && !slices.Contains(out, x) {
			out = append(out, x)
		}
	case map[string]any:
		for _, k := range inventory.SortedKeys(x) {
			out = refs(x[k], out)
		}
	case []any:
		for _, e := range x {
			out = refs(e, out)
		}
	}
	return out
}
