package incluster

import (
	"encoding/json"
	"path"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	appsv1ac "k8s.io/client-go/applyconfigurations/apps/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"

	"github.com/fleet-agent/fleet-agent/internal/config"
	"github.com/fleet-agent/fleet-agent/internal/providers"
	"github.com/fleet-agent/fleet-agent/internal/substrate/join"
)

// The names of docs/substrates.md: this project's own, the
// same in every cluster.
const (
	// ClaimNamespace and ClaimName are the claim ConfigMap, created before
	// anything else is put in a cluster.
	ClaimNamespace = "kube-system"
	ClaimName      = "fleet-agent-substrate"
	// Namespace holds the node daemon's objects.
	Namespace = "fleet-node"
	// ConfigMapName and DaemonSetName are the node daemon's config and
	// DaemonSet, both in Namespace.
	ConfigMapName = "fleet-node"
	DaemonSetName = "fleet-node"
	// SecretName is the join token's Secret in Namespace.
	SecretName = "fleet-node-join"
	// FieldManager owns every field the agent applies.
	FieldManager = "fleet-agent"

	// LabelManagedBy is on every object the agent puts in a cluster.
	LabelManagedBy = "app.kubernetes.io/managed-by"
	ManagedBy      = "fleet-agent"
	// labelName tells the node daemon's Pods apart from anything else
	// labelled with the pool: the DaemonSet's selector.
	labelName = "app.kubernetes.io/name"
	appName   = "fleet-node"

	// The claim's data: which pool of which deployment holds the cluster.
	claimKeyPoolID = "poolId"
	claimKeyPool   = "pool"
	claimKeyTenant = "tenant"

	// annotationSerial is on the join Secret: the serial of the token it
	// holds (never any part of the token), so that a Secret left with an
	// older token is replaced.
	annotationSerial = "fleet-agent.dev/join-token-serial"
	// secretKeyToken is the Secret's key, the file the daemon reads.
	secretKeyToken = "token"

	// The mounts, where join.RunDaemon looks by default.
	configDir = join.DefaultConfigDir
	stateDir  = join.DefaultStateDir
)

// GPUResources are the extended resources a GPU workload requests: a pod
// requesting either holds a Node's teardown, and the taints of the same
// keys are tolerated by the node daemon.
var GPUResources = []corev1.ResourceName{"nvidia.com/gpu", "amd.com/gpu"}

// Labels are the labels of every object the agent puts in a cluster for
// the pool.
func Labels(poolID string) map[string]string {
	return map[string]string{providers.LabelSubstratePool: poolID, LabelManagedBy: ManagedBy}
}

func podLabels(poolID string) map[string]string {
	l := Labels(poolID)
	l[labelName] = appName
	return l
}

// secretFileMode is the mode of the files of the Secret and the token the
// node daemon reads: its user's only.
const secretFileMode int32 = 0o400

// joinDir is where the join Secret is mounted: its key token is the file
// the daemon reads (join.DefaultTokenFile).
var joinDir = path.Dir(join.DefaultTokenFile)

// podTokenDir is where the Pod's projected token is mounted
// (join.DefaultPodTokenFile).
var podTokenDir = path.Dir(join.DefaultPodTokenFile)

// claimObject is the claim ConfigMap, created (never applied) so that an
// existing one, another deployment's, is refused by the API server itself.
func claimObject(poolID, pool, tenant string) *corev1.ConfigMap {
	cm := &corev1.ConfigMap{}
	cm.Name, cm.Namespace, cm.Labels = ClaimName, ClaimNamespace, Labels(poolID)
	cm.Data = map[string]string{claimKeyPoolID: poolID, claimKeyPool: pool, claimKeyTenant: tenant}
	return cm
}

func namespaceApply(poolID string) *corev1ac.NamespaceApplyConfiguration {
	return corev1ac.Namespace(Namespace).WithLabels(Labels(poolID))
}

// configMapApply is what the node daemon reads: join.KeyPoolID,
// join.KeyJoinURL and join.KeyCAPins (a JSON list), one file each.
func configMapApply(poolID string, d *config.NodeDaemon) *corev1ac.ConfigMapApplyConfiguration {
	data := map[string]string{join.KeyPoolID: poolID, join.KeyJoinURL: d.JoinURL}
	if len(d.CAPins) > 0 {
		pins, _ := json.Marshal(d.CAPins) // a []string always marshals
		data[join.KeyCAPins] = string(pins)
	}
	return corev1ac.ConfigMap(ConfigMapName, Namespace).WithLabels(Labels(poolID)).WithData(data)
}

// secretApply holds the join token. It is built only to be sent; nothing
// prints it.
func secretApply(poolID, token string, serial uint64) *corev1ac.SecretApplyConfiguration {
	return corev1ac.Secret(SecretName, Namespace).WithLabels(Labels(poolID)).
		WithAnnotations(map[string]string{annotationSerial: strconv.FormatUint(serial, 10)}).
		WithType(corev1.SecretTypeOpaque).
		WithData(map[string][]byte{secretKeyToken: []byte(token)})
}

// daemonSetApply is the node daemon: only on the Nodes labelled with the
// pool id, through GPU taints, its Node name from the downward API, the
// join Secret mounted optional (so that its Pods keep running once it is
// deleted, and start before it exists).
//
// Its Pod runs with the least it needs. It is not privileged, cannot gain
// privileges (no setuid, no file capabilities), holds no Linux capability,
// runs under the runtime's default seccomp profile, shares none of the
// host's namespaces (its network is the Pod's: it only dials the join
// listener), gets no token for the Kubernetes API, and cannot write its
// own image (a read-only root file system). Its Secret files are 0400.
//
// What it still takes from the host, and why:
//   - the directory /var/lib/fleet-node (a hostPath, the only one, created
//     by the kubelet), where it keeps its node key so that a restarted Pod
//     heartbeats instead of needing a join token again;
//   - user 0 inside the container. That directory is created by the
//     kubelet owned by root with mode 0755, and a hostPath gets no fsGroup,
//     so another user could not write it. With every capability dropped,
//     user 0 has no power beyond owning that directory and reading its own
//     mounts (no CAP_DAC_OVERRIDE, CAP_CHOWN, CAP_SYS_ADMIN...), and the
//     host's other files are not mounted. A runtime with user namespaces
//     (hostUsers: false) would map it to an unprivileged host user; it is
//     not set because not every provider's node image supports it yet.
//
// image is d.Image, or its digest form once resolved (internal/imagepin).
func daemonSetApply(poolID string, d *config.NodeDaemon, image string) *appsv1ac.DaemonSetApplyConfiguration {
	var tolerations []*corev1ac.TolerationApplyConfiguration
	for _, r := range GPUResources {
		tolerations = append(tolerations, corev1ac.Toleration().WithKey(string(r)).WithOperator(corev1.TolerationOpExists))
	}
	hostPathType := corev1.HostPathDirectoryOrCreate
	seccomp := corev1ac.SeccompProfile().WithType(corev1.SeccompProfileTypeRuntimeDefault)
	spec := corev1ac.PodSpec().
		WithSecurityContext(corev1ac.PodSecurityContext().WithSeccompProfile(seccomp)).
		WithNodeSelector(map[string]string{providers.LabelSubstratePool: poolID}).
		WithTolerations(tolerations...).
		WithAutomountServiceAccountToken(false).
		WithContainers(corev1ac.Container().
			WithName("fleet-node").
			WithImage(image).
			WithSecurityContext(corev1ac.SecurityContext().
				WithRunAsUser(0). // said, not left to the image: see above
				WithPrivileged(false).
				WithAllowPrivilegeEscalation(false).
				WithReadOnlyRootFilesystem(true).
				WithCapabilities(corev1ac.Capabilities().WithDrop("ALL")).
				WithSeccompProfile(seccomp)).
			WithEnv(corev1ac.EnvVar().WithName(join.NodeNameEnv).
				WithValueFrom(corev1ac.EnvVarSource().WithFieldRef(corev1ac.ObjectFieldSelector().WithFieldPath("spec.nodeName"))),
				// The Pod's uid goes with each heartbeat: a Pod restarted on
				// the Node finds the old Pod's key in the host's state
				// directory, and the agent refuses it from a new Pod, which
				// joins again with its own token.
				corev1ac.EnvVar().WithName(join.PodUIDEnv).
					WithValueFrom(corev1ac.EnvVarSource().WithFieldRef(corev1ac.ObjectFieldSelector().WithFieldPath("metadata.uid")))).
			WithVolumeMounts(
				corev1ac.VolumeMount().WithName("config").WithMountPath(configDir).WithReadOnly(true),
				corev1ac.VolumeMount().WithName("join").WithMountPath(joinDir).WithReadOnly(true),
				corev1ac.VolumeMount().WithName("pod-token").WithMountPath(podTokenDir).WithReadOnly(true),
				corev1ac.VolumeMount().WithName("state").WithMountPath(stateDir),
			).
			WithResources(corev1ac.ResourceRequirements().WithRequests(corev1.ResourceList{
				corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("32Mi"),
			}))).
		WithVolumes(
			corev1ac.Volume().WithName("config").WithConfigMap(corev1ac.ConfigMapVolumeSource().WithName(ConfigMapName)),
			corev1ac.Volume().WithName("join").WithSecret(corev1ac.SecretVolumeSource().WithSecretName(SecretName).WithOptional(true).WithDefaultMode(secretFileMode)),
			// The Pod's own token for joining (join.PodAudience, not the
			// API's audience: it opens nothing in the cluster), renewed by
			// the kubelet; the API token itself is not mounted.
			corev1ac.Volume().WithName("pod-token").WithProjected(corev1ac.ProjectedVolumeSource().WithDefaultMode(secretFileMode).
				WithSources(corev1ac.VolumeProjection().WithServiceAccountToken(corev1ac.ServiceAccountTokenProjection().
					WithAudience(join.PodAudience).WithExpirationSeconds(join.PodTokenSeconds).WithPath(path.Base(join.DefaultPodTokenFile))))),
			corev1ac.Volume().WithName("state").WithHostPath(corev1ac.HostPathVolumeSource().WithPath(stateDir).WithType(hostPathType)),
		)
	if d.RuntimeClass != "" {
		spec = spec.WithRuntimeClassName(d.RuntimeClass)
	}
	return appsv1ac.DaemonSet(DaemonSetName, Namespace).WithLabels(Labels(poolID)).
		WithSpec(appsv1ac.DaemonSetSpec().
			WithSelector(metav1ac.LabelSelector().WithMatchLabels(podLabels(poolID))).
			WithTemplate(corev1ac.PodTemplateSpec().WithLabels(podLabels(poolID)).WithSpec(spec)))
}
