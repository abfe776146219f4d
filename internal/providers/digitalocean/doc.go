// Package digitalocean is the DOKS adapter: it satisfies providers.Kubernetes
// for accounts of provider `digitalocean` through github.com/digitalocean/godo
// and nothing else.
//
// The client is built per call, with godo.New over an oauth2 static token
// source made from the account's `token` reference resolved at that moment,
// and dropped when the call returns: the API token is never kept. godo.New
// without a retry config makes one HTTP request per call (NewFromToken would
// turn godo's retries on), so the substrate's journal stays the only retry
// authority.
//
// DOKS differs from the other providers in ways the adapter has to carry:
//
//   - Clusters are regional, node pools have no zones and take their size's
//     disk, `nodes` is a pool's total, and a fixed-size pool has at least one
//     node (Rules says so, and EnsureNodePool refuses the rest as Invalid).
//   - A cluster is created with a node pool of its own (the config's
//     defaultNodePool): DOKS refuses a cluster without a worker.
//   - There are no client tokens. Idempotency is by name: every cluster and
//     node pool the adapter makes carries the tag `fleet-agent`, and a create
//     is preceded by a lookup of the account's clusters (every page) for that
//     name, region and tag, so a create whose answer was lost is found, never
//     made twice. Other reads by name (the substrate reads a create back by
//     name until the cluster runs) go through the UUID the adapter last made
//     or found for that name, checked against the answer, so that a poll is
//     one request rather than a walk over the account's clusters.
//   - Tags hold only letters, digits, ':', '-' and '_', so this project's
//     labels travel as tags spelt `fleet-agent:<name>:<value>` for the label
//     `fleet-agent.dev/<name>=<value>` (see tags.go); node pools also carry
//     them as Kubernetes labels, spelt as they are.
//   - The cluster's UUID is its provider-global id and its adopt id.
//   - DigitalOcean's own GPU device plugins are on by default with a GPU node
//     pool; they would hand out the GPUs the node daemon books, so a GPU node
//     pool is refused (reason devicePluginOn) on a cluster that has them on,
//     and the clusters the adapter creates have them off.
//
// Reads decode DigitalOcean's answers into godo's types with two additions
// (wire.go): a cluster state kept as a string, since godo v1.237.0 refuses
// states the OpenAPI description lists ("deleting"), and the node pool field
// of the Spot preview, which godo does not have.
package digitalocean
