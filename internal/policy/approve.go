package policy

import (
	"strings"

	"github.com/fleet-agent/fleet-agent/internal/plan"
)

// MarkApproved marks each broken approve rule of rep approved when one of
// approvals (the GitHub logins that approved the reviewed head) is one of
// its approvers, by login or as a member of a named org/team. isMember
// answers team membership (the forge reads it); its error stops MarkApproved, so
// that an approval never counts by default when GitHub cannot be read.
func MarkApproved(rep *plan.PolicyReport, approvals []string, isMember func(org, team, login string) (bool, error)) error {
	if rep == nil {
		return nil
	}
	for i := range rep.Rules {
		v := &rep.Rules[i]
		if v.Verdict != plan.VerdictApprove || v.Approved != "" {
			continue
		}
		who, err := approvedBy(v.Approvers, approvals, isMember)
		if err != nil {
			return err
		}
		v.Approved = who
	}
	return nil
}

func approvedBy(approvers, approvals []string, isMember func(org, team, login string) (bool, error)) (string, error) {
	for _, login := range approvals {
		for _, a := range approvers {
			if strings.EqualFold(a, login) {
				return strings.ToLower(login), nil
			}
		}
	}
	for _, login := range approvals {
		for _, a := range approvers {
			org, team, ok := strings.Cut(a, "/")
			if !ok {
				continue
			}
			member, err := isMember(org, team, login)
			if err != nil {
				return "", err
			}
			if member {
				return login + " (" + a + ")", nil
			}
		}
	}
	return "", nil
}
