// Package providers is the boundary between fleet-agent's orchestration and
// the cloud providers that run managed Kubernetes for it (GKE, EKS, DOKS and
// an in-process fake).
//
// It holds only what both sides must agree on: the shapes that cross the
// boundary (accounts, cluster and node pool specs and states, short-lived
// credentials, machine types, location rules), errors that carry a class and
// a side effect, a registry that the binary fills with adapters, and the
// conformance cases in the conformance subpackage. It imports no SDK.
//
// The interfaces here are the widest an adapter must satisfy. Consumers
// (plan, substrate) declare the smaller interfaces they actually call, and
// an adapter satisfies both. Adapters never retry: a call is made once and
// its error says what happened (Class) and whether the provider may have
// acted (SideEffect). Only the substrate's journal retries, and it settles an
// ambiguous outcome by reading the provider back (GetCluster, GetNodePool by
// name), which is why every mutating call is idempotent by name and takes a
// client token.
package providers
