// Package doemu is an HTTP emulator of the DigitalOcean API routes that the
// digitalocean adapter reaches through godo: the account, sizes, Kubernetes
// options, clusters, node pools and their nodes, upgrades, credentials and
// kubeconfigs. It answers with
// DigitalOcean's wire format (wrapped roots, snake_case, RFC 3339 times,
// `{"id","message","request_id"}` errors, `RateLimit-*` headers), moves
// clusters and nodes through their states per observation or on an injected
// clock, refuses what the service refuses (busy clusters, names and sizes out
// of bounds, quotas, stockouts, rate limits), puts a cluster in degraded or
// error on request (SetClusterState), and records every exchange so
// that tests can count the calls a step made and hold them against
// DigitalOcean's OpenAPI description (package wirecheck).
//
// It can front a real kube-apiserver: Options.Kube gives the endpoint and CA
// handed out for every cluster, and TokenReviewPath answers kube-apiserver's
// webhook token authentication for the credentials it minted, until they
// expire on its clock.
//
// Where DigitalOcean's behaviour is not documented the emulator has to pick
// an answer; every such place carries a comment starting "Guess:", and the
// adapter is written to cope with the other answer too.
package doemu
