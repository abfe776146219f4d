package incluster

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fleet-agent/fleet-agent/internal/substrate/join"
)

// TestDaemonSetLeastPrivilege: the node daemon's Pod, as the apply leaves
// it, runs with no privilege it does not need: no escalation, a read-only
// root file system, every capability dropped, the runtime's seccomp
// profile, not privileged, no service-account token for the API, none of
// the host's namespaces, and its Secret and token files readable by their
// owner only (0400); its only host path is its state directory.
func TestDaemonSetLeastPrivilege(t *testing.T) {
	u := newUnit(t)
	if _, err := u.ic.Apply(t.Context(), u.target("create")); err != nil {
		t.Fatal(err)
	}
	ds, err := u.kc.AppsV1().DaemonSets(Namespace).Get(t.Context(), DaemonSetName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	spec := ds.Spec.Template.Spec
	if spec.HostNetwork || spec.HostPID || spec.HostIPC {
		t.Errorf("host namespaces: network %v pid %v ipc %v", spec.HostNetwork, spec.HostPID, spec.HostIPC)
	}
	if spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken {
		t.Error("the API token is mounted")
	}
	psc := spec.SecurityContext
	if psc == nil || psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("pod seccomp profile: %+v", psc)
	}
	for _, c := range append(spec.InitContainers, spec.Containers...) {
		sc := c.SecurityContext
		if sc == nil {
			t.Fatalf("container %s has no security context", c.Name)
		}
		if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
			t.Errorf("%s: allowPrivilegeEscalation %v", c.Name, sc.AllowPrivilegeEscalation)
		}
		if sc.RunAsUser == nil || *sc.RunAsUser != 0 {
			t.Errorf("%s: runAsUser %v, want 0 said explicitly (the state directory is root's)", c.Name, sc.RunAsUser)
		}
		if sc.Privileged != nil && *sc.Privileged {
			t.Errorf("%s: privileged", c.Name)
		}
		if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
			t.Errorf("%s: readOnlyRootFilesystem %v", c.Name, sc.ReadOnlyRootFilesystem)
		}
		if sc.Capabilities == nil || len(sc.Capabilities.Drop) != 1 || sc.Capabilities.Drop[0] != "ALL" || len(sc.Capabilities.Add) != 0 {
			t.Errorf("%s: capabilities %+v", c.Name, sc.Capabilities)
		}
		if sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
			t.Errorf("%s: seccomp %+v", c.Name, sc.SeccompProfile)
		}
		for _, m := range c.VolumeMounts {
			if m.Name != "state" && !m.ReadOnly {
				t.Errorf("%s: the mount %s is writable", c.Name, m.Name)
			}
		}
	}
	hostPaths, projected := 0, 0
	for _, v := range spec.Volumes {
		switch {
		case v.HostPath != nil:
			hostPaths++
			if v.Name != "state" || v.HostPath.Path != stateDir {
				t.Errorf("host path %s: %s", v.Name, v.HostPath.Path)
			}
		case v.Secret != nil:
			if v.Secret.DefaultMode == nil || *v.Secret.DefaultMode != 0o400 {
				t.Errorf("the Secret volume %s: defaultMode %v, want 0400", v.Name, v.Secret.DefaultMode)
			}
		case v.Projected != nil:
			if v.Projected.DefaultMode == nil || *v.Projected.DefaultMode != 0o400 {
				t.Errorf("the projected volume %s: defaultMode %v, want 0400", v.Name, v.Projected.DefaultMode)
			}
			if len(v.Projected.Sources) != 1 || v.Projected.Sources[0].ServiceAccountToken == nil {
				t.Fatalf("the projected volume %s: %+v", v.Name, v.Projected.Sources)
			}
			sat := v.Projected.Sources[0].ServiceAccountToken
			if sat.Audience != join.PodAudience || sat.ExpirationSeconds == nil || *sat.ExpirationSeconds > 3600 || v.Name+"/"+sat.Path != "pod-token/token" {
				t.Errorf("the Pod token: audience %q, expiry %v, path %s", sat.Audience, sat.ExpirationSeconds, sat.Path)
			}
			projected++
		}
	}
	if projected != 1 {
		t.Errorf("%d projected Pod tokens, want 1", projected)
	}
	for _, m := range spec.Containers[0].VolumeMounts {
		if m.Name == "pod-token" && m.MountPath+"/token" != join.DefaultPodTokenFile {
			t.Errorf("the Pod token is mounted at %s, the daemon reads %s", m.MountPath, join.DefaultPodTokenFile)
		}
	}
	if hostPaths != 1 {
		t.Errorf("%d host paths", hostPaths)
	}
}
