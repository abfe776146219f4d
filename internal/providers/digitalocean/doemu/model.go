package doemu

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"maps"
	"math/big"
	"slices"
	"strings"
	"time"
)

// op is a change in progress: done after a number of observations, or of
// StepEvery intervals of the clock since it started.
type op struct {
	steps    int
	observed int
	started  time.Time
}

func (e *Emulator) newOp(steps int) *op {
	return &op{steps: steps, started: e.opts.Clock.Now()}
}

func (e *Emulator) done(o *op) bool {
	if o == nil {
		return true
	}
	n := o.observed
	if e.opts.StepEvery > 0 {
		n += int(e.opts.Clock.Now().Sub(o.started) / e.opts.StepEvery)
	}
	return n >= o.steps
}

func (o *op) look() {
	if o != nil {
		o.observed++
	}
}

type node struct {
	id, name, dropletID string
	// state is provisioning, running or draining; a drained node is gone.
	state            string
	op               *op
	created, updated time.Time
	// version is the release the node was made with; an upgrade replaces
	// the nodes whose release is not the cluster's.
	version string
}

type pool struct {
	id, name, size string
	count          int
	tags           []string
	labels         map[string]string
	taints         []taint
	autoScale      bool
	minNodes       int
	maxNodes       int
	spot           bool
	nodes          []*node
	// deleting: DELETE was accepted; the pool goes once its nodes drained.
	deleting bool
	op       *op
}

type taint struct {
	Key    string `json:"key"`
	Value  string `json:"value"`
	Effect string `json:"effect"`
}

type cluster struct {
	id, name, region, version string
	team                      string
	tags                      []string
	vpc                       string
	clusterSubnet             string
	serviceSubnet             string
	workerSubnet              string
	isolated                  bool
	ha                        bool
	autoUpgrade               bool
	surgeUpgrade              bool
	maint                     maintenance
	settings                  settings
	nvidiaPlugin, amdPlugin   *bool
	state, message            string
	// op is the create, upgrade or delete in progress; target the version
	// an upgrade goes to.
	op               *op
	target           string
	pools            []*pool
	endpoint         string
	created, updated time.Time
}

// observe counts one look at the cluster and everything in it.
func (c *cluster) observe() {
	c.op.look()
	for _, p := range c.pools {
		p.observe()
	}
}

func (p *pool) observe() {
	p.op.look()
	for _, n := range p.nodes {
		n.op.look()
	}
}

// settle applies every change that is done. It reports whether the cluster
// still exists. Called with mu held.
func (e *Emulator) settle(c *cluster) bool {
	now := e.opts.Clock.Now()
	if c.op != nil && e.done(c.op) {
		switch c.state {
		case "provisioning":
			c.state, c.message = "running", ""
		case "upgrading":
			// The control plane is done; the nodes are replaced next, and
			// the cluster stays upgrading until they are.
			c.version, c.target, c.message = c.target, "", "upgrading node pools"
		case e.opts.DeletingState:
			delete(e.clusters, c.id)
			e.order = slices.DeleteFunc(e.order, func(id string) bool { return id == c.id })
			return false
		}
		c.op = nil
		c.updated = now
	}
	for _, p := range slices.Clone(c.pools) {
		e.settlePool(c, p, now)
	}
	if c.state == "upgrading" && c.op == nil {
		e.roll(c, now)
	}
	return true
}

// maxSurge is how many nodes of a pool DOKS replaces at once in a surge
// upgrade (DigitalOcean's documentation: up to 10 new nodes per pool).
const maxSurge = 10

// roll replaces the nodes of every pool that still run the old release,
// one wave at a time per pool: with surge_upgrade up to maxSurge new nodes
// come up beside as many draining old ones, without it one. The cluster
// runs again once no pool has an old node; its message counts the nodes
// replaced, which is the progress DOKS shows. Called with mu held.
//
// Guess: DOKS documents surge upgrades per pool but not whether the
// replaced nodes drain while their replacements boot or after; the
// emulator does both at once.
func (e *Emulator) roll(c *cluster, now time.Time) {
	done, total, settled := 0, 0, true
	for _, p := range c.pools {
		if p.deleting {
			continue
		}
		total += p.count
		var stale []*node
		moving := false
		for _, n := range p.nodes {
			switch {
			case n.state != "running":
				moving = true
			case n.version != c.version:
				stale = append(stale, n)
			default:
				done++
			}
		}
		if moving || len(stale) > 0 {
			settled = false
		}
		if moving || len(stale) == 0 {
			continue
		}
		k := 1
		if c.surgeUpgrade {
			k = min(len(stale), maxSurge)
		}
		for _, n := range stale[:k] {
			n.state, n.op, n.updated = "draining", e.newOp(e.opts.Steps.Drain), now
			e.addNode(c, p, now)
		}
	}
	if settled {
		c.state, c.message, c.updated = "running", "", now
		return
	}
	c.message = fmt.Sprintf("upgrading node pools: %d of %d nodes replaced", done, total)
}

// addNode starts one new node of a pool on the cluster's release. Called
// with mu held.
func (e *Emulator) addNode(c *cluster, p *pool, now time.Time) {
	e.seq++
	id := e.uuid("node", e.seq)
	p.nodes = append(p.nodes, &node{
		id: id, name: p.name + "-" + suffix(id), dropletID: fmt.Sprint(300000000 + e.seq),
		state: "provisioning", op: e.newOp(e.opts.Steps.Node), created: now, updated: now, version: c.version,
	})
}

func (e *Emulator) settlePool(c *cluster, p *pool, now time.Time) {
	kept := p.nodes[:0]
	for _, n := range p.nodes {
		if n.op != nil && e.done(n.op) {
			switch n.state {
			case "provisioning":
				n.state, n.op, n.updated = "running", nil, now
			case "draining":
				continue // drained: gone
			}
		}
		kept = append(kept, n)
	}
	p.nodes = kept
	if p.deleting && len(p.nodes) == 0 && e.done(p.op) {
		c.pools = slices.DeleteFunc(c.pools, func(q *pool) bool { return q == p })
	}
}

// reconcile brings a pool's nodes toward its count: new nodes provision,
// the newest extra ones drain. Called with mu held.
func (e *Emulator) reconcile(c *cluster, p *pool) {
	now := e.opts.Clock.Now()
	live := 0
	for _, n := range p.nodes {
		if n.state != "draining" {
			live++
		}
	}
	for ; live < p.count; live++ {
		e.addNode(c, p, now)
	}
	for i := len(p.nodes) - 1; i >= 0 && live > p.count; i-- {
		if n := p.nodes[i]; n.state != "draining" {
			n.state, n.op, n.updated = "draining", e.newOp(e.opts.Steps.Drain), now
			live--
		}
	}
	c.updated = now
}

// uuid derives an id from what it is and the sequence, so the same calls in
// the same order give the same ids; it is shaped as an RFC 4122 version 4
// UUID, as DigitalOcean's are.
func (e *Emulator) uuid(kind string, n int) string {
	h := sha256.Sum256(fmt.Appendf(nil, "doemu:%s:%d", kind, n))
	h[6] = h[6]&0x0f | 0x40
	h[8] = h[8]&0x3f | 0x80
	x := hex.EncodeToString(h[:16])
	return x[0:8] + "-" + x[8:12] + "-" + x[12:16] + "-" + x[16:20] + "-" + x[20:32]
}

// suffix is the node name's tail: DOKS names nodes `<pool>-<suffix>`.
func suffix(id string) string {
	const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
	h := sha256.Sum256([]byte(id))
	var b strings.Builder
	for i := range 5 {
		b.WriteByte(alphabet[int(h[i])%len(alphabet)])
	}
	return b.String()
}

func (e *Emulator) size(slug string) (Size, bool) {
	for _, s := range e.opts.Sizes {
		if s.Slug == slug {
			return s, true
		}
	}
	return Size{}, false
}

func (e *Emulator) hasRegion(slug string) bool {
	return slices.ContainsFunc(e.opts.Regions, func(r Region) bool { return r.Slug == slug })
}

// gpuVendor says which device plugin a pool's size needs: "nvidia", "amd"
// or "".
func (e *Emulator) gpuVendor(size string) string {
	s, ok := e.size(size)
	if !ok || s.GPU == nil {
		return ""
	}
	vendor, _, _ := strings.Cut(s.GPU.Model, "_")
	return vendor
}

// plugin is the device plugin state a cluster shows: what it was set to, or,
// left unset, on once a pool of that vendor's GPUs exists (DigitalOcean's
// documented default) and absent otherwise.
func (e *Emulator) plugin(c *cluster, set *bool, vendor string) *plugin {
	if set != nil {
		v := *set
		return &plugin{Enabled: &v}
	}
	for _, p := range c.pools {
		if e.gpuVendor(p.size) == vendor {
			on := true
			return &plugin{Enabled: &on}
		}
	}
	return nil
}

func cloneLabels(m map[string]string) map[string]string {
	if m == nil {
		return nil
	}
	return maps.Clone(m)
}

// newCA makes the emulator's own cluster CA: a real certificate, so that a
// client given it parses it, though no server of the emulator presents it.
func newCA() []byte {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		panic(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "doemu cluster CA", Organization: []string{"DigitalOcean emulator"}},
		NotBefore:             time.Unix(0, 0),
		NotAfter:              time.Unix(1<<33, 0),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		panic(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}
