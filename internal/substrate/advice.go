package substrate

// advice is what a person does about each reason a condition gives: the
// one table the page and the doctor read, so that the advice beside a
// message never contradicts it. Reasons of work in progress say that
// nothing is needed; the ones that need a person say what and whether the
// agent then goes on by itself or must be restarted.
var advice = map[string]string{
	ReasonAccountFound:       "Nothing: the account's adapter is open.",
	ReasonAccountUnavailable: "Add the account's providers.<id> block to the agent's config, or fix the account the pool names, then restart the agent (systemctl restart fleet-agent): adapters open at start, so until then the substrate is not reconciled.",

	ReasonClusterRunning:           "Nothing: the cluster runs.",
	ReasonClusterProvisioning:      "Nothing: the provider is making the cluster; the agent looks again on its own.",
	ReasonClusterUpdating:          "Nothing: the provider is updating the cluster; the agent looks again on its own.",
	ReasonClusterDeletedElsewhere:  "Nothing: the cluster is being deleted at the provider, not by fleet-agent; it is made again once gone.",
	ReasonClusterInError:           "Look at the cluster in the provider's console: the message says what it reports; the agent looks again on its own once the provider fixes it.",
	ReasonClusterNotOurs:           "The cluster's name is taken by a cluster fleet-agent did not make: delete or rename that cluster, or adopt it in the document (policy.substrate).",
	ReasonClusterKeepsDisappearing: "Something outside fleet-agent keeps deleting the cluster: stop it (the message says how often), then the agent makes it again on its own.",
	ReasonAdoptedClusterNotFound:   "The adopted cluster is not at the provider: fix the id in the document (policy.substrate) or the account's access to it.",

	ReasonClaimed:      "Nothing: the cluster is claimed.",
	ReasonClaimRefused: "The provider refused the claim on the cluster: the message says why (credentials, permissions, quota); fix that and the agent retries on its own.",

	ReasonNodePoolsReady:            "Nothing: the node pools are ready.",
	ReasonNodePoolProvisioning:      "Nothing: the provider is making the node pools; the agent looks again on its own.",
	ReasonNodePoolDeletedElsewhere:  "Nothing: a node pool is being deleted at the provider, not by fleet-agent; it is made again once gone.",
	ReasonNodePoolError:             "The provider reports a node pool in error: the message says what (quota, a flavor it does not offer); fix that at the provider or in the document, and the agent retries on its own.",
	ReasonNodePoolNotOurs:           "A node pool's name is taken by one fleet-agent did not make: delete or rename it at the provider.",
	ReasonNodePoolKeepsDisappearing: "Something outside fleet-agent keeps deleting a node pool: stop it, then the agent makes it again on its own.",
	ReasonNodePoolKeepsDiffering:    "The provider keeps another value than the document's: change the document to a value the provider keeps.",
	ReasonNodePoolKeepsComingBack:   "Something outside fleet-agent keeps making a node pool fleet-agent deletes: stop it.",
	ReasonOutsideWindow:             "Nothing, or widen the maintenance window: the step waits for the next one, which the message names.",
	ReasonDraining:                  "Nothing: a node pool's Nodes are being emptied before it goes; the agent goes on on its own.",
	ReasonDrainBlocked:              "The message names the pods or booking that hold the drain and since when: let them finish, relax the PodDisruptionBudget or end the booking, or set drain.then to force with a timeout in the document; the drain goes on on its own once nothing holds it.",
	ReasonReplacing:                 "Nothing: a blue/green replacement is under way (the message says which step); the old node pool goes once the new one runs and the old is drained.",

	ReasonVersionCurrent:    "Nothing: the control plane and every node pool run the document's minor.",
	ReasonUpgradeInProgress: "Nothing: an upgrade hop is under way at the provider (the message says which and how far); the next one follows on its own.",
	ReasonUpgradeRefused:    "The provider refused the upgrade hop: the message gives its words (a minor it does not offer, a skew it will not allow); apply a version the provider accepts, or fix what it names, and the next pass tries again.",

	ReasonNodeDaemonApplied:       "Nothing: the node daemon is applied.",
	ReasonNodeDaemonNotConfigured: "Set substrate.nodeDaemon and substrate.join in the agent's config, then restart the agent: the Nodes do not join without it.",
	ReasonNodeDaemonApplyFailed:   "The cluster's API refused the node daemon: the message says why (access to the cluster, its API); fix that and the agent retries on its own.",
	ReasonNodeDaemonRemoval:       "Nothing: the node daemon's removal is tried again on its own.",

	ReasonTornDown:               "Nothing: the substrate is gone.",
	ReasonTearingDown:            "Nothing: the substrate is being deleted; the agent looks again on its own.",
	ReasonAdopterWaiting:         "Nothing: another pool adopts the cluster once this teardown is done.",
	ReasonClusterKeepsComingBack: "Something outside fleet-agent keeps making the cluster fleet-agent deletes: stop it.",

	ReasonOrphansRemoved:   "Nothing: the orphan clusters are gone.",
	ReasonOrphansRemaining: "Orphan clusters of this substrate remain: the message names them; they are deleted on the next passes.",

	ReasonOperationInProgress: "Nothing: an operation at the provider is under way.",
	ReasonProviderReadFailed:  "Nothing yet: a read at the provider failed and is tried again on its own; if it lasts, check the provider's reach.",
	ReasonOperationRefused:    "The provider refused an operation: the message says why (credentials, quota, the document); fix that and it is tried again on the long schedule.",
	ReasonOperationFailed:     "An operation failed in a way a retry does not fix: change the document (the message says what the provider objected to).",
	ReasonProviderReadRefused: "The provider refused a read: fix the account's credentials or permissions; the agent retries on its own.",
}

// Advice is what to do about a condition's reason ("" for a reason the
// table does not know, which a test keeps from happening).
func Advice(reason string) string { return advice[reason] }

// FailingReason is the reason of the first condition that needs a person
// (status False), "" when none does.
func FailingReason(conds []StatusCondition) string {
	for _, c := range conds {
		if c.Status == ConditionFalse {
			return c.Reason
		}
	}
	return ""
}

// fallbackAdvice is said for a substrate in error without a failing
// condition, as records written before conditions were kept are.
const fallbackAdvice = "Fix what the message names; the agent retries on its own, except where the message says to restart it."

// AdviceFor is what to do about a substrate in error: the advice of its
// first failing condition's reason.
func AdviceFor(conds []StatusCondition) string {
	if a := Advice(FailingReason(conds)); a != "" {
		return a
	}
	return fallbackAdvice
}
