package eksemu

import (
	"fmt"
	"slices"
	"strconv"
)

// DescribeClusterVersions (GET /cluster-versions): the Kubernetes versions
// a cluster of this account may be created at or upgraded to, as EKS
// lists them. Read-only: it answers from the emulator's options.
//
// Every offered version is in standard support: the emulator models no
// support calendar.
//
// Guess: the order (newest first), the platform version ("eks.1") and the
// patch (".0") are illustrative; release and end-of-support dates are
// left out (the model marks them optional).

// clusterVersionStatuses are the values of the versionStatus filter, and
// those of the deprecated status filter, in EKS's spellings.
var (
	clusterVersionStatuses = []string{"UNSUPPORTED", "STANDARD_SUPPORT", "EXTENDED_SUPPORT"}
	legacyVersionStatuses  = []string{"unsupported", "standard-support", "extended-support"}
)

func (x *exchange) describeClusterVersions(_ []string) {
	e := x.e
	q := x.r.URL.Query()
	if t := q.Get("clusterType"); t != "" && t != "eks" {
		// Guess: a cluster type EKS does not know is refused as a bad
		// parameter; "eks" is the only type this account has.
		x.invalid(fmt.Sprintf("clusterType %s is not supported", t), nil)
		return
	}
	if s := q.Get("versionStatus"); s != "" && !slices.Contains(clusterVersionStatuses, s) {
		x.invalid(fmt.Sprintf("versionStatus must be one of %v", clusterVersionStatuses), nil)
		return
	}
	if s := q.Get("status"); s != "" && !slices.Contains(legacyVersionStatuses, s) {
		x.invalid(fmt.Sprintf("status must be one of %v", legacyVersionStatuses), nil)
		return
	}
	defaultOnly := false
	if d := q.Get("defaultOnly"); d != "" {
		b, err := strconv.ParseBool(d)
		if err != nil {
			x.invalid("defaultOnly must be true or false", nil)
			return
		}
		defaultOnly = b
	}
	wanted := q["clusterVersions"]
	statusFilter := q.Get("versionStatus") != "" && q.Get("versionStatus") != "STANDARD_SUPPORT" ||
		q.Get("status") != "" && q.Get("status") != "standard-support"
	var names []string
	for i := len(e.opts.Versions) - 1; i >= 0; i-- {
		v := e.opts.Versions[i]
		switch {
		case statusFilter, defaultOnly && v != e.opts.DefaultVersion:
			continue
		case len(wanted) > 0 && !slices.Contains(wanted, v):
			continue
		}
		names = append(names, v)
	}
	got, next, ok := x.pageJSON(names, 100)
	if !ok {
		return
	}
	list := []map[string]any{}
	for _, v := range got {
		list = append(list, map[string]any{
			"clusterVersion":         v,
			"clusterType":            "eks",
			"defaultPlatformVersion": "eks.1",
			"defaultVersion":         v == e.opts.DefaultVersion,
			"status":                 "standard-support",
			"versionStatus":          "STANDARD_SUPPORT",
			"kubernetesPatchVersion": v + ".0",
		})
	}
	x.eksOK(withNext(map[string]any{"clusterVersions": list}, next))
}
