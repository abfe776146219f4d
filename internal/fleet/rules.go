package fleet

import (
	"encoding/json"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/fleet-agent/fleet-agent/internal/maintenance"
	"github.com/fleet-agent/fleet-agent/internal/secrets"
)

// isSecretField reports whether a provider config key must hold a secret
// reference (docs/document.md).
func isSecretField(k string) bool {
	switch k {
	case "token", "password", "secret":
		return true
	}
	for _, suf := range []string{"Token", "Password", "Secret", "Key"} {
		if strings.HasSuffix(k, suf) {
			return true
		}
	}
	return false
}

// MaxUserDataBytes bounds a template's inline cloud-init.
const MaxUserDataBytes = 32 << 10

// ruleFindings checks what the schema cannot say. It is written against
// the raw tree and skips anything of the wrong shape: the schema stage has
// already reported that.
func ruleFindings(tree any) []finding {
	root, _ := tree.(map[string]any)
	var out []finding
	list := func(key string) []any { a, _ := root[key].([]any); return a }
	str := func(m map[string]any, k string) (string, bool) { s, ok := m[k].(string); return s, ok }

	// Repeated names: the later item's name is the one reported.
	repeated := func(items []any, base, field string, keyOf func(m map[string]any) (string, bool), subject func(key string) string) {
		first := map[string]int{}
		for i, it := range items {
			m, _ := it.(map[string]any)
			k, ok := keyOf(m)
			if !ok {
				continue
			}
			if j, seen := first[k]; seen {
				out = append(out, finding{ptr: joinPointer(base, strconv.Itoa(i), field),
					msg: fmt.Sprintf("%s is repeated (first at %s); each must be unique", subject(k), joinPointer(base, strconv.Itoa(j), field))})
				continue
			}
			first[k] = i
		}
	}
	byName := func(m map[string]any) (string, bool) { return str(m, "name") }
	subject := func(what string) func(string) string {
		return func(k string) string { return what + " " + strconv.Quote(k) }
	}
	for _, l := range []struct{ key, what string }{{"sites", "site"}, {"providerAccounts", "provider account"}, {"pools", "pool"}, {"sandboxTemplates", "sandbox template"}} {
		repeated(list(l.key), "/"+l.key, "name", byName, subject(l.what))
	}
	repeated(list("flavors"), "/flavors", "name", func(m map[string]any) (string, bool) {
		p, ok1 := str(m, "pool")
		n, ok2 := str(m, "name")
		return p + "/" + n, ok1 && ok2
	}, subject("flavor"))

	for pi, p := range list("pools") {
		pool, _ := p.(map[string]any)
		pbase := joinPointer("/pools", strconv.Itoa(pi))
		offers, _ := pool["offers"].([]any)
		repeated(offers, pbase+"/offers", "tenant", func(m map[string]any) (string, bool) { return str(m, "tenant") }, subject("an offer to tenant"))
		policy, _ := pool["policy"].(map[string]any)
		sub, _ := policy["substrate"].(map[string]any)
		sflavors, _ := sub["flavors"].([]any)
		repeated(sflavors, pbase+"/policy/substrate/flavors", "name", byName, subject("substrate flavor"))
		out = append(out, windowFindings(pbase+"/policy/substrate/maintenance/windows", sub)...)
		out = append(out, drainFindings(pbase+"/policy/substrate/drain", sub)...)
		out = append(out, budgetFindings(pbase+"/policy/disruptionBudget", policy)...)
		out = append(out, replaceFindings(pbase+"/policy/substrate/flavors", sflavors)...)
		for fi, f := range sflavors {
			fm, _ := f.(map[string]any)
			out = append(out, drainFindings(joinPointer(pbase, "policy", "substrate", "flavors", strconv.Itoa(fi), "drain"), fm)...)
			as, _ := fm["autoscaling"].(map[string]any)
			lo, ok1 := intOf(as["minNodes"])
			hi, ok2 := intOf(as["maxNodes"])
			if ok1 && ok2 && lo > hi {
				out = append(out, finding{ptr: joinPointer(pbase, "policy", "substrate", "flavors", strconv.Itoa(fi), "autoscaling", "minNodes"),
					msg: fmt.Sprintf("minNodes (%d) must be at most maxNodes (%d)", lo, hi)})
			}
		}
	}

	for ai, a := range list("providerAccounts") {
		acc, _ := a.(map[string]any)
		if cfg, ok := acc["config"].(map[string]any); ok {
			out = append(out, secretFields(joinPointer("/providerAccounts", strconv.Itoa(ai), "config"), cfg)...)
		}
	}

	for ti, t := range list("sandboxTemplates") {
		tpl, _ := t.(map[string]any)
		base := joinPointer("/sandboxTemplates", strconv.Itoa(ti))
		if env, ok := tpl["env"].(map[string]any); ok {
			keys := make([]string, 0, len(env))
			for k := range env {
				keys = append(keys, k)
			}
			slices.Sort(keys)
			for _, k := range keys {
				v, ok := env[k].(string)
				if !ok {
					continue // the schema reports the type
				}
				if r, err := secrets.ParseRef(v); err != nil || !r.TenantScoped() {
					out = append(out, finding{ptr: joinPointer(base, "env", k),
						msg: fmt.Sprintf("env %s must be a secret://TENANT/ID reference; values are never written in the document", k)})
				}
			}
		}
		if ud, ok := tpl["userData"].(string); ok {
			if secrets.LooksLikeRef(ud) {
				if r, err := secrets.ParseRef(ud); err != nil || !r.TenantScoped() {
					out = append(out, finding{ptr: base + "/userData", msg: "userData must be inline cloud-init or a secret://TENANT/ID reference to it"})
				}
			} else if len(ud) > MaxUserDataBytes {
				out = append(out, finding{ptr: base + "/userData",
					msg: fmt.Sprintf("userData is %d bytes; at most %d (32 KiB) are allowed inline; store it as a secret and write secret://TENANT/ID", len(ud), MaxUserDataBytes)})
			}
		}
		if w, ok := tpl["warm"].(map[string]any); ok {
			lo, ok1 := intOf(w["min"])
			hi, ok2 := intOf(w["max"])
			if ok1 && ok2 && lo > hi {
				out = append(out, finding{ptr: base + "/warm/min", msg: fmt.Sprintf("warm.min (%d) must be at most warm.max (%d)", lo, hi)})
			}
		}
		lo, ok1 := intOf(tpl["defaultTtlSeconds"])
		hi, ok2 := intOf(tpl["maxTtlSeconds"])
		if ok1 && ok2 && lo > hi {
			out = append(out, finding{ptr: base + "/defaultTtlSeconds", msg: fmt.Sprintf("defaultTtlSeconds (%d) must be at most maxTtlSeconds (%d)", lo, hi)})
		}
	}
	return out
}

// windowFindings are what maintenance.Parse finds in a substrate's
// windows that the schema cannot say: a duration out of range, a day
// repeated, a time zone the zone database does not hold.
func windowFindings(base string, sub map[string]any) []finding {
	mt, _ := sub["maintenance"].(map[string]any)
	ws, _ := mt["windows"].([]any)
	specs := make([]maintenance.Spec, len(ws))
	for i, w := range ws {
		wm, _ := w.(map[string]any)
		days, _ := wm["days"].([]any)
		for _, d := range days {
			if ds, ok := d.(string); ok {
				specs[i].Days = append(specs[i].Days, ds)
			}
		}
		specs[i].Start, _ = wm["start"].(string)
		specs[i].Duration, _ = wm["duration"].(string)
		specs[i].TimeZone, _ = wm["timeZone"].(string)
	}
	_, problems := maintenance.Parse(specs)
	var out []finding
	for _, p := range problems {
		// The schema says what is wrong with the form (and a zone name
		// of characters no zone has); the rules say the rest.
		if p.Form || p.Field == "timeZone" && !zoneName.MatchString(specs[p.Index].TimeZone) && specs[p.Index].TimeZone != "" {
			continue
		}
		out = append(out, finding{ptr: joinPointer(base, strconv.Itoa(p.Index), p.Field), msg: p.Message})
	}
	return out
}

// budgetFindings: a disruption budget is a share of the pool's nodes, from
// 0 to 1 (the schema says it is a number).
func budgetFindings(ptr string, policy map[string]any) []finding {
	n, ok := policy["disruptionBudget"].(json.Number)
	if !ok {
		return nil
	}
	if f, err := n.Float64(); err == nil && f >= 0 && f <= 1 {
		return nil
	}
	return []finding{{ptr: ptr, msg: fmt.Sprintf("%s is out of range: a disruption budget is the share of the pool's nodes that may be unavailable at once, from 0 to 1 (0.1 is a tenth, 0.5 a half)", n)}}
}

// drainFindings are what the schema cannot say of a drain: a timeout out
// of range, and force with no timeout to be forced after.
func drainFindings(base string, parent map[string]any) []finding {
	dm, ok := parent["drain"].(map[string]any)
	if !ok {
		return nil
	}
	var out []finding
	ts, hasTimeout := dm["timeout"].(string)
	// The schema says what is wrong with the form; the rule the range.
	if d, err := time.ParseDuration(ts); hasTimeout && err == nil && durationForm.MatchString(ts) && (d < DrainTimeoutMin || d > DrainTimeoutMax) {
		out = append(out, finding{ptr: joinPointer(base, "timeout"),
			msg: fmt.Sprintf("%s is out of range: a drain's timeout is from %s to %s", ts, shortDuration(DrainTimeoutMin), shortDuration(DrainTimeoutMax))})
	}
	if then, _ := dm["then"].(string); then == DrainForce && !hasTimeout {
		out = append(out, finding{ptr: joinPointer(base, "then"),
			msg: `then "force" needs a timeout to force after; add "timeout" (1h, say) or use then "wait"`})
	}
	return out
}

// durationForm is the schema's pattern of a drain's timeout.
var durationForm = regexp.MustCompile(`^([1-9][0-9]{0,2}h)?([1-9][0-9]{0,3}m)?$`)

// shortDuration is 168h, 1m: as the document writes them.
func shortDuration(d time.Duration) string {
	s := d.String()
	s = strings.TrimSuffix(s, "0s")
	return strings.TrimSuffix(s, "0m")
}

// zoneName is the schema's pattern of maintenance.windows[].timeZone.
var zoneName = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_+/-]{0,63}$`)

// secretFields applies the secret rule at every depth of a provider config.
// The message never repeats the value: it may be a secret pasted by mistake.
func secretFields(base string, v any) []finding {
	var out []finding
	switch x := v.(type) {
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			ptr := joinPointer(base, k)
			if isSecretField(k) {
				s, ok := x[k].(string)
				if !ok {
					out = append(out, finding{ptr: ptr, msg: fmt.Sprintf("%s must hold a secret reference (secret://NAME, vault://PATH#FIELD or env://VAR), got %s", k, kindOf(x[k]))})
					continue
				}
				if _, err := secrets.ParseRef(s); err != nil {
					out = append(out, finding{ptr: ptr, msg: fmt.Sprintf("%s must hold a secret reference, not a value: %v", k, err)})
				}
				continue
			}
			out = append(out, secretFields(ptr, x[k])...)
		}
	case []any:
		for i, e := range x {
			out = append(out, secretFields(joinPointer(base, strconv.Itoa(i)), e)...)
		}
	case string:
		// Whatever the field is called (gcp's credentials, a field of an
		// adapter to come): a private key is a secret.
		if holdsPrivateKey(x) {
			out = append(out, finding{ptr: base, msg: fmt.Sprintf("%s holds a private key; write a secret reference to it (secret://NAME, vault://PATH#FIELD or env://VAR), never the key", lastToken(base))})
		}
	}
	return out
}

// holdsPrivateKey reports whether a value carries a private key: a PEM
// block of one, or a service account key's JSON (its private_key field).
func holdsPrivateKey(s string) bool {
	return strings.Contains(s, "PRIVATE KEY-----") || strings.Contains(s, `"private_key"`) || strings.Contains(s, "PRIVATE KEY BLOCK-----")
}

// intOf returns an integral number's value (2.0 and 1e2 are integers, as
// JSON Schema says); ok is false for anything else.
func intOf(v any) (int64, bool) {
	n, ok := v.(json.Number)
	if !ok {
		return 0, false
	}
	return integer(string(n))
}

// CheckSecrets applies the document's secret rules to one field of one
// object changed outside a document (a break-glass edit): a provider
// account's config keeps references in its secret fields, a template's env
// values are secret://TENANT/ID, its userData inline or such a reference.
// The error never repeats the value.
func CheckSecrets(kind, field string, v any) error {
	var found []finding
	switch {
	case kind == "providerAccount" && field == "config":
		found = secretFields("/config", v)
	case kind == "sandboxTemplate" && field == "env":
		m, ok := v.(map[string]any)
		if !ok {
			break
		}
		for _, k := range slices.Sorted(maps.Keys(m)) {
			s, _ := m[k].(string)
			if r, err := secrets.ParseRef(s); err != nil || !r.TenantScoped() {
				found = append(found, finding{ptr: joinPointer("/env", k), msg: fmt.Sprintf("env %s must be a secret://TENANT/ID reference, not a value", k)})
			}
		}
	case kind == "sandboxTemplate" && field == "userData":
		s, _ := v.(string)
		if secrets.LooksLikeRef(s) {
			if r, err := secrets.ParseRef(s); err != nil || !r.TenantScoped() {
				found = append(found, finding{ptr: "/userData", msg: "userData must be inline cloud-init or a secret://TENANT/ID reference to it"})
			}
		} else if len(s) > MaxUserDataBytes {
			found = append(found, finding{ptr: "/userData", msg: fmt.Sprintf("userData is %d bytes; at most %d inline", len(s), MaxUserDataBytes)})
		}
	}
	if len(found) == 0 {
		return nil
	}
	es := make([]Error, len(found))
	for i, f := range found {
		es[i] = Error{Path: f.ptr, Message: f.msg}
	}
	return finish("edit", es).Refusal()
}
