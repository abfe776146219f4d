package clients

import (
	"fmt"
	"strings"
	"testing"
)

// TestAWSCLIDescribesClusterVersions: the vendor's own client reads the
// versions the emulator offers (`aws eks describe-cluster-versions`), with
// its filters and its paging, and a bad filter is refused with EKS's code.
func TestAWSCLIDescribesClusterVersions(t *testing.T) {
	for _, c := range findCLIs(t) {
		t.Run(fmt.Sprintf("v%d", c.major), func(t *testing.T) {
			s := newSession(t, c)
			if code, _, errOut := s.run("eks", "describe-cluster-versions"); code == 252 && strings.Contains(errOut, "Invalid choice") {
				// Said, not counted: an older CLI has no such command
				// (EKS added the operation in November 2024).
				t.Skipf("%s (%s) has no describe-cluster-versions", c.path, c.version)
			}
			all := s.ok("eks", "describe-cluster-versions")
			list, _ := all["clusterVersions"].([]any)
			var got []string
			def := ""
			for _, v := range list {
				m, _ := v.(map[string]any)
				got = append(got, str(m, "clusterVersion"))
				if str(m, "defaultVersion") == "true" {
					def = str(m, "clusterVersion")
				}
				s.want("versionStatus of "+str(m, "clusterVersion"), str(m, "versionStatus"), "STANDARD_SUPPORT")
				s.want("clusterType of "+str(m, "clusterVersion"), str(m, "clusterType"), "eks")
			}
			s.want("versions, newest first", fmt.Sprint(got), "[1.35 1.34 1.33]")
			s.want("default", def, "1.34")
			only := s.ok("eks", "describe-cluster-versions", "--default-only")
			s.want("--default-only", str(only, "clusterVersions"), `[{"clusterType":"eks","clusterVersion":"1.34","defaultPlatformVersion":"eks.1","defaultVersion":true,"kubernetesPatchVersion":"1.34.0","status":"standard-support","versionStatus":"STANDARD_SUPPORT"}]`)
			one := s.ok("eks", "describe-cluster-versions", "--cluster-versions", "1.33")
			if l, _ := one["clusterVersions"].([]any); len(l) != 1 || str(l[0].(map[string]any), "clusterVersion") != "1.33" {
				t.Errorf("--cluster-versions 1.33: %v", one)
			}
			// One page of one: the CLI follows nextToken itself.
			paged := s.ok("eks", "describe-cluster-versions", "--page-size", "1")
			if l, _ := paged["clusterVersions"].([]any); len(l) != 3 {
				t.Errorf("--page-size 1 gave %d versions, want the 3 over three pages: %v", len(l), paged)
			}
			s.fails("InvalidParameterException", "DescribeClusterVersions", "versionStatus must be one of",
				"eks", "describe-cluster-versions", "--version-status", "RETIRED")
		})
	}
}
