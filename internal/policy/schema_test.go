package policy

import (
	"encoding/json"
	"slices"
	"testing"

	"github.com/fleet-agent/fleet-agent/schema"
)

// TestSchemaAgrees holds the published schema to the loader: the same
// kinds, change types, actions and limits.
func TestSchemaAgrees(t *testing.T) {
	var s struct {
		Properties struct {
			Rules struct {
				MaxItems int `json:"maxItems"`
			} `json:"rules"`
		} `json:"properties"`
		Defs struct {
			Rule struct {
				Required   []string `json:"required"`
				Properties struct {
					Match struct {
						Properties struct {
							Kinds   struct{ Items struct{ Enum []string } } `json:"kinds"`
							Changes struct{ Items struct{ Enum []string } } `json:"changes"`
						} `json:"properties"`
					} `json:"match"`
					Expression struct {
						MaxLength int `json:"maxLength"`
					} `json:"expression"`
					Action struct{ Enum []string } `json:"action"`
				} `json:"properties"`
			} `json:"rule"`
		} `json:"$defs"`
	}
	if err := json.Unmarshal(schema.PolicyJSON, &s); err != nil {
		t.Fatalf("the policy schema is not JSON: %v", err)
	}
	r := s.Defs.Rule.Properties
	for _, c := range []struct {
		what      string
		got, want []string
	}{
		{"kinds", r.Match.Properties.Kinds.Items.Enum, kindNames()},
		{"changes", r.Match.Properties.Changes.Items.Enum, changes},
		{"actions", r.Action.Enum, []string{string(Deny), string(Warn), string(Approve)}},
		{"required", s.Defs.Rule.Required, []string{"name", "expression", "action"}},
	} {
		if !slices.Equal(c.got, c.want) {
			t.Errorf("%s: schema %v, loader %v", c.what, c.got, c.want)
		}
	}
	if s.Properties.Rules.MaxItems != MaxRules || r.Expression.MaxLength != MaxExprBytes {
		t.Errorf("limits: schema %d rules, %d bytes; loader %d, %d", s.Properties.Rules.MaxItems, r.Expression.MaxLength, MaxRules, MaxExprBytes)
	}
}
