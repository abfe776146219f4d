package providers

// The labels the substrate puts on its node pools' Nodes. They are this
// project's names; the node daemon's DaemonSet selects on LabelSubstratePool.
const (
	LabelSubstratePool = "fleet-agent.dev/substrate-pool"
	LabelCapacity      = "fleet-agent.dev/capacity"
	CapacitySpot       = "spot"
)

// NodePoolName is the name of the node pool of one flavor of a pool:
// `fa-<last 6 characters of the pool id>-<flavor>`. The prefix and the pool
// id part keep it from ever matching a node pool the owner made on an
// adopted cluster.
func NodePoolName(poolID, flavor string) string {
	tail := poolID
	if len(tail) > 6 {
		tail = tail[len(tail)-6:]
	}
	return "fa-" + tail + "-" + flavor
}

// PoolLabels are the labels of a flavor's node pool: the pool it belongs to,
// and for a Spot flavor its capacity.
func PoolLabels(poolID string, spot bool) map[string]string {
	l := map[string]string{LabelSubstratePool: poolID}
	if spot {
		l[LabelCapacity] = CapacitySpot
	}
	return l
}
