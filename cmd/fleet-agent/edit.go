package main

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/fleet-agent/fleet-agent/internal/apply"
	"github.com/fleet-agent/fleet-agent/internal/inventory"
	"github.com/fleet-agent/fleet-agent/internal/localapi"
	"github.com/fleet-agent/fleet-agent/internal/refusal"
	"github.com/fleet-agent/fleet-agent/internal/state"
)

func (a *app) editCommand() *cobra.Command {
	var del bool
	cmd := &cobra.Command{
		Use:   "edit KIND NAME FIELD=JSON... | edit --delete KIND NAME",
		Short: "Break glass: change one object outside the document (audited)",
		Long: `Changes one object of the fleet directly, as an operator must during an
incident: FIELD=JSON sets a field (JSON null removes it), --delete removes the
object. Each edit is audited with the local user. The next drift check reports it;
apply the document again to undo it. References to sites, pools and provider
accounts are ids, as the state stores them. What a reviewed plan guards about a
pool's Kubernetes substrate is refused (INVALID_STATE, audited): deleting a pool
that has one, adding one, changing anything of it but putting protect on, or the
pool's disruptionBudget. So is what the document could not undo: a field that
never changes once created, and deleting an object another names. Those go
through the document.`,
		Args: cobra.MinimumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			kind, name := inventory.Kind(args[0]), args[1]
			set := map[string]any{}
			for _, kv := range args[2:] {
				f, v, ok := strings.Cut(kv, "=")
				if !ok || f == "" {
					return fmt.Errorf("%q is not FIELD=JSON", kv)
				}
				dec := json.NewDecoder(strings.NewReader(v))
				dec.UseNumber()
				var val any
				if err := dec.Decode(&val); err != nil || dec.More() {
					return refusal.New(refusal.InvalidInput, "the value of %s is not JSON (strings need quotes: %s='\"x\"')", f, f)
				}
				set[f] = val
			}
			if del && len(set) > 0 {
				return fmt.Errorf("--delete takes no FIELD=JSON")
			}
			cfg, err := a.loadConfig()
			if err != nil {
				return err
			}
			// Through the socket the agent audits the peer's credentials
			// and says under which name; alone, the edit is this user's.
			req := localapi.EditRequest{Kind: string(kind), Name: name, Set: set, Delete: del}
			audited := who()
			if c := a.agentClient(cmd.Context(), cfg); c != nil {
				var out struct {
					Who string `json:"who"`
				}
				if err := c.Do(cmd.Context(), "POST", "/v1/edit", req, &out); err != nil {
					return err
				}
				audited = out.Who
			} else {
				store, err := state.Open(a.stateFile(cfg), state.Options{})
				if err != nil {
					return err
				}
				defer store.Close()
				if err := apply.ApplyEdit(store, apply.Edit{Kind: kind, Name: name, Set: set, Delete: del, Who: audited}); err != nil {
					return err
				}
			}
			what := "changed"
			if del {
				what = "deleted"
			}
			fmt.Fprintf(a.stdout, "%s %s %s (audited as %s); drift will report it until the document is applied again.\n", kind, name, what, audited)
			return nil
		},
	}
	cmd.Flags().BoolVar(&del, "delete", false, "delete the object")
	return cmd
}
