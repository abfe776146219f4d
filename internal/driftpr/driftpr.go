// Package driftpr is the drift proposal: the fleet.json that keeps a drift
// (the committed file with only the drifted values rewritten to what the
// fleet now is) and the text that explains it to a reviewer (each field
// before and after, who changed it, the two choices). It decides nothing
// about when a proposal is opened or closed; the agent does.
package driftpr

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/fleet-agent/fleet-agent/internal/canon"
	"github.com/fleet-agent/fleet-agent/internal/inventory"
	"github.com/fleet-agent/fleet-agent/internal/plan"
	"github.com/fleet-agent/fleet-agent/internal/splice"
	"github.com/fleet-agent/fleet-agent/internal/state"
)

// BranchPrefix names the agent's own branches; the short drift hash follows.
const BranchPrefix = "fleet-agent/drift-"

// Branch is the branch of one distinct drift.
func Branch(driftHash string) string {
	h := strings.TrimPrefix(driftHash, "sha256:")
	if len(h) > 12 {
		h = h[:12]
	}
	return BranchPrefix + h
}

// Field is one drifted value written into the file.
type Field struct {
	Kind    inventory.Kind
	Name    string
	Field   string
	Pointer string
	Before  string // the document's value (JSON), "" when the file omits it
	After   string // the fleet's value (JSON), "" when the fleet has none
	Source  string // who changed it, from the audit log
}

// Unwritten is a drift the proposal does not write, with the reason.
type Unwritten struct {
	Kind inventory.Kind
	Name string
	// Field is the one field left out when the rest of the object is
	// written ("" when the whole object's drift is).
	Field  string
	Reason string
	Source string
	// Blocked: the plan blocks the change, so the document must not say
	// it (the rest could be written by a person).
	Blocked bool
}

// Rewrite is the outcome of writing a drift into a file.
type Rewrite struct {
	File      []byte
	Fields    []Field
	Unwritten []Unwritten
	// Changed counts the bytes of the file that differ (old side), Drifted
	// the bytes of the old values that drifted: equal when only those moved.
	Changed, Drifted int
}

// arrays says where each kind's objects live in the document.
var arrays = map[inventory.Kind]string{
	inventory.ProviderAccount: "providerAccounts",
	inventory.Site:            "sites",
	inventory.Pool:            "pools",
	inventory.Flavor:          "flavors",
	inventory.SandboxTemplate: "sandboxTemplates",
}

// Write rewrites file (the committed fleet.json) so that it says what the
// fleet now is for every field the drift plan p changes, leaving every other
// byte alone. live is the document exported from the fleet as it is; audit
// is the audit log (newest last), read for who changed each value.
func Write(file []byte, p *plan.Plan, live *inventory.Snapshot, liveDoc []byte, audit []state.AuditRow, tenant string) (*Rewrite, error) {
	return WriteExcept(file, p, live, liveDoc, audit, tenant, nil)
}

// FieldKey names one field of one object, for WriteExcept.
func FieldKey(k inventory.Kind, name, field string) string {
	return string(k) + "\x00" + name + "\x00" + field
}

// WriteExcept is Write leaving out the fields that skip names (by
// FieldKey), each listed as blocked with its reason: the rest of the
// object is written.
func WriteExcept(file []byte, p *plan.Plan, live *inventory.Snapshot, liveDoc []byte, audit []state.AuditRow, tenant string, skip map[string]string) (*Rewrite, error) {
	var fileTree, liveTree map[string]any
	if err := decode(file, &fileTree); err != nil {
		return nil, err
	}
	if err := decode(liveDoc, &liveTree); err != nil {
		return nil, err
	}
	out := &Rewrite{File: file}
	for _, c := range p.Doing() {
		src := source(audit, live, tenant, c.Kind, c.Name, "")
		arr, ok := arrays[c.Kind]
		// A blocked change is one no apply may make: written, the document
		// would claim what the plan refuses, so it is listed whatever it is.
		switch {
		case c.Blocked != "":
			out.Unwritten = append(out.Unwritten, Unwritten{c.Kind, c.Name, "", "blocked: " + c.Blocked, src, true})
			continue
		case !ok:
			out.Unwritten = append(out.Unwritten, Unwritten{c.Kind, c.Name, "", "this drift pull request writes fields of sites, provider accounts, pools, flavors and sandbox templates; write this " + string(c.Kind) + " into the document by hand", src, false})
			continue
		case c.Action == plan.Create:
			out.Unwritten = append(out.Unwritten, Unwritten{c.Kind, c.Name, "", "the document holds this object but the fleet no longer does; removing it from the document is left to a person", src, false})
			continue
		case c.Action == plan.Delete:
			out.Unwritten = append(out.Unwritten, Unwritten{c.Kind, c.Name, "", "the fleet holds this object but the document does not; adding it is left to a person (fleet-agent export shows it)", src, false})
			continue
		case c.Action != plan.Update:
			continue
		}
		fi, fobj := find(fileTree, arr, c.Kind, c.Name)
		_, lobj := find(liveTree, arr, c.Kind, c.Name)
		var spec map[string]any
		if o, ok := live.ByName(c.Kind, c.Name); ok {
			spec = o.Spec
		}
		if fobj == nil || lobj == nil {
			out.Unwritten = append(out.Unwritten, Unwritten{c.Kind, c.Name, "", "the object cannot be found by name in " + arr + " of the file at the tip of the branch", src, false})
			continue
		}
		for _, f := range c.Fields {
			if why, ok := skip[FieldKey(c.Kind, c.Name, f)]; ok {
				out.Unwritten = append(out.Unwritten, Unwritten{c.Kind, c.Name, f, why, source(audit, live, tenant, c.Kind, c.Name, f), true})
				continue
			}
			before, hasBefore := fobj[f]
			after, hasAfter := lobj[f]
			if hasAfter && (absent(after, spec, f) || inventory.EmptyWhenLeftOut(c.Kind, f) && isEmptyObject(after)) {
				hasAfter = false
			}
			base := fmt.Sprintf("/%s/%d", arr, fi)
			fld := Field{Kind: c.Kind, Name: c.Name, Source: source(audit, live, tenant, c.Kind, c.Name, f)}
			if err := out.write(base, f, f, fld, before, hasBefore, after, hasAfter); err != nil {
				return nil, err
			}
		}
	}
	out.Changed = changed(file, out.File)
	return out, nil
}

// write splices one field: into objects member by member, so a change deep
// inside (policy.maxNodes) rewrites that value alone; anything else whole.
func (out *Rewrite) write(base, key, path string, fld Field, before any, hasBefore bool, after any, hasAfter bool) error {
	if hasBefore && hasAfter && equal(before, after) {
		return nil // the tip already says it
	}
	ptr := base + "/" + splice.Escape(key)
	bm, bok := before.(map[string]any)
	am, aok := after.(map[string]any)
	if hasBefore && hasAfter && bok && aok {
		keys := map[string]bool{}
		for k := range bm {
			keys[k] = true
		}
		for k := range am {
			keys[k] = true
		}
		for _, k := range slices.Sorted(maps.Keys(keys)) {
			bv, hb := bm[k]
			av, ha := am[k]
			if err := out.write(ptr, k, path+"."+k, fld, bv, hb, av, ha); err != nil {
				return err
			}
		}
		return nil
	}
	d, err := splice.Parse(out.File)
	if err != nil {
		return err
	}
	fld.Field, fld.Pointer = path, ptr
	if hasBefore {
		fld.Before = string(canon.MustMarshal(before))
		if sp, ok := d.Lookup(ptr); ok {
			out.Drifted += sp.End - sp.Start
			fld.Before = string(out.File[sp.Start:sp.End]) // as the file spells it
		}
	}
	var next []byte
	if hasAfter {
		fld.After = string(canon.MustMarshal(after))
		next, err = d.Set(ptr, []byte(fld.After))
	} else {
		next, err = d.Remove(ptr)
	}
	if err != nil {
		return err
	}
	out.File = next
	out.Fields = append(out.Fields, fld)
	return nil
}

// absent reports whether the export's empty object at path stands for a
// value the fleet does not hold: the export writes a nested object the
// fleet lacks as {}. Written member by member, a removed policy would stay
// in the file as an emptied object; removed whole, the member is gone, as
// the fleet has it. (A field the document reads as {} when left out is
// removed whole too: the two say the same, and the removal is the smaller
// diff a reviewer reads.)
func absent(after any, spec map[string]any, path ...string) bool {
	if m, ok := after.(map[string]any); !ok || len(m) != 0 || spec == nil {
		return false
	}
	var cur any = spec
	for _, k := range path {
		m, ok := cur.(map[string]any)
		if !ok {
			return true
		}
		if cur, ok = m[k]; !ok || cur == nil {
			return true
		}
	}
	return false
}

func isEmptyObject(v any) bool {
	m, ok := v.(map[string]any)
	return ok && len(m) == 0
}

func decode(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	return dec.Decode(v)
}

func equal(a, b any) bool {
	ca, err1 := canon.Marshal(a)
	cb, err2 := canon.Marshal(b)
	return err1 == nil && err2 == nil && bytes.Equal(ca, cb)
}

// find returns the index and object of a kind's object by its fleet name
// (a flavor's fleet name is POOL/NAME).
func find(tree map[string]any, arr string, k inventory.Kind, name string) (int, map[string]any) {
	list, _ := tree[arr].([]any)
	pool, short, isFlavor := "", name, false
	if k == inventory.Flavor {
		pool, short, isFlavor = strings.Cut(name, "/")
		if !isFlavor {
			short = name
		}
	}
	for i, it := range list {
		m, _ := it.(map[string]any)
		if m == nil || m["name"] != short {
			continue
		}
		if isFlavor && m["pool"] != pool {
			continue
		}
		return i, m
	}
	return -1, nil
}

// changed counts the old bytes between the first and the last difference.
func changed(a, b []byte) int {
	i := 0
	for i < len(a) && i < len(b) && a[i] == b[i] {
		i++
	}
	j := 0
	for j < len(a)-i && j < len(b)-i && a[len(a)-1-j] == b[len(b)-1-j] {
		j++
	}
	return len(a) - i - j
}

// source says who last changed an object's field outside the document: the
// newest audited edit of it, or the provider when no edit names it.
func source(audit []state.AuditRow, live *inventory.Snapshot, tenant string, k inventory.Kind, name, field string) string {
	id := inventory.ID(tenant, k, name)
	if o, ok := live.ByName(k, name); ok {
		id = o.ID
	}
	for _, r := range slices.Backward(audit) {
		if r.Action != "edit" || !strings.HasPrefix(r.Method, string(k)+".") {
			continue
		}
		var params map[string]any
		if json.Unmarshal(r.Params, &params) != nil || params["id"] != id {
			continue
		}
		if _, ok := params[field]; field != "" && !ok && !strings.Contains(r.Method, ".delete") {
			continue
		}
		return fmt.Sprintf("`edit` by %s at %s", cell(r.Who), time.UnixMilli(r.At).UTC().Format(time.RFC3339))
	}
	return "changed at the provider, not through fleet-agent"
}

// Choices are the options a drift proposal offers, for its body.
type Choices struct {
	Branch        string // the branch the agent applies
	RevertOnClose bool
	FirstSeen     time.Time
	DriftHash     string
	Marker        string // the hidden marker that ties the text to this drift
	// Undoes is the refused tip of Branch whose change of the file the
	// proposal undoes ("" when it is built on the applied tip).
	Undoes string
}

// Body is the text of a drift proposal.
func Body(rw *Rewrite, ch Choices) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s\n### The fleet drifted from `%s`\n\n", ch.Marker, ch.Branch)
	fmt.Fprintf(&b, "First seen %s. This pull request writes the fleet as it now is into `fleet.json`, changing only the values that drifted.\n\n", ch.FirstSeen.UTC().Format(time.RFC3339))
	if len(rw.Fields) > 0 {
		b.WriteString("| object | field | document | fleet now | source |\n| --- | --- | --- | --- | --- |\n")
		for _, f := range rw.Fields {
			fmt.Fprintf(&b, "| %s `%s` | `%s` | %s | %s | %s |\n", f.Kind, cell(f.Name), cell(f.Field), code(f.Before), code(f.After), row(f.Source))
		}
		b.WriteString("\n")
	}
	if ch.Undoes != "" {
		fmt.Fprintf(&b, "The tip `%s` of `%s` was refused and is not applied. This pull request is written on the document that is applied, so merging it also **undoes that commit's change of the file** (it shows in the diff).\n\n", ch.Undoes, ch.Branch)
	}
	if len(rw.Unwritten) > 0 {
		b.WriteString("Not written into the document (a blocked change never is). The plan of this pull request still makes the calls that put these back as the document has them, so it cannot be merged as a keep while any is listed: merged, it is refused; keep the rest by writing these by hand, or close it:\n\n")
		for _, u := range rw.Unwritten {
			what := ""
			if u.Field != "" {
				what = " `" + cell(u.Field) + "`"
			}
			fmt.Fprintf(&b, "- %s `%s`%s: %s (%s)\n", u.Kind, cell(u.Name), what, u.Reason, row(u.Source))
		}
		b.WriteString("\n")
	}
	b.WriteString("**Merge to keep** the fleet as it is: the merged document's plan makes no calls, so applying it records the fleet as the new baseline and the drift clears.\n\n")
	if ch.RevertOnClose {
		b.WriteString("**Close to revert**: the agent applies the document of `" + ch.Branch + "` again, which undoes the change above, and deletes this branch.\n")
	} else {
		b.WriteString("**Close** and the drift stays reported (`drift.revertOnClose` is off): undo it by applying the document again (`fleet-agent apply`), or turn `drift.revertOnClose` on.\n")
	}
	fmt.Fprintf(&b, "\nDrift hash `%s`.\n", ch.DriftHash)
	return b.String()
}

func code(v string) string {
	if v == "" {
		return "(none)"
	}
	if len(v) > 200 {
		v = v[:200] + "…"
	}
	return "`" + cell(v) + "`"
}

// row keeps a source's own code spans but not what would break the table.
func row(s string) string {
	return strings.NewReplacer("|", `\|`, "\n", " ").Replace(s)
}

func cell(s string) string {
	return strings.NewReplacer("|", `\|`, "\n", " ", "`", "'").Replace(s)
}
