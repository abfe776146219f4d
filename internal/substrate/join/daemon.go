package join

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/fleet-agent/fleet-agent/internal/backoff"
	"github.com/fleet-agent/fleet-agent/internal/clock"
	"github.com/fleet-agent/fleet-agent/internal/secrets"
)

// Where the node daemon finds what the in-cluster half gives it
// (DaemonSet fleet-node/fleet-node): the ConfigMap fleet-node/fleet-node,
// the optional Secret fleet-node/fleet-node-join, and a directory of its
// own on the Node.
const (
	DefaultConfigDir = "/etc/fleet-node/config"
	DefaultTokenFile = "/etc/fleet-node/join/token"
	DefaultStateDir  = "/var/lib/fleet-node"
	// NodeNameEnv holds the Node name (the downward API's spec.nodeName),
	// PodUIDEnv the Pod's uid (metadata.uid).
	NodeNameEnv = "NODE_NAME"
	PodUIDEnv   = "POD_UID"

	// The ConfigMap's keys, one file each in the config directory.
	KeyPoolID  = "poolId"
	KeyJoinURL = "joinURL"
	KeyCAPins  = "caPins"

	configMapName = "fleet-node/fleet-node"
	secretName    = "fleet-node/fleet-node-join"
	keyFileName   = "node.json"
)

// Phase is where the node daemon is.
type Phase string

// The phases a daemon reports.
const (
	// PhaseWaitingForConfig: the ConfigMap's files or NODE_NAME are missing
	// or wrong.
	PhaseWaitingForConfig Phase = "waitingForConfig"
	// PhaseWaitingForToken: no join token file yet.
	PhaseWaitingForToken Phase = "waitingForToken"
	// PhaseRefused: the agent refused the token, the Node name or the node
	// key (Status.Code says which).
	PhaseRefused Phase = "refused"
	// PhaseUnreachable: the join listener did not answer (or answered
	// 5xx, or rate-limited the address).
	PhaseUnreachable Phase = "unreachable"
	// PhasePinMismatch: the listener's certificate matches no pin, or is
	// not trusted by the system roots when there are none.
	PhasePinMismatch Phase = "pinMismatch"
	// PhaseJoined: the daemon joined and holds a node key.
	PhaseJoined Phase = "joined"
	// PhaseConnected: a heartbeat was accepted.
	PhaseConnected Phase = "connected"
)

// Status is what the daemon last found; Message says it for a person.
type Status struct {
	Phase Phase
	// Code is the listener's refusal code, when there was one.
	Code    string
	Message string
	// Retry is how long until the next attempt, after a failure.
	Retry time.Duration
}

// DaemonOptions configure RunDaemon; zero fields take the defaults.
type DaemonOptions struct {
	ConfigDir string // DefaultConfigDir
	TokenFile string // DefaultTokenFile
	// PodTokenFile is the Pod's projected token (DefaultPodTokenFile),
	// sent first when it is there.
	PodTokenFile string
	StateDir     string // DefaultStateDir
	NodeName     string // required: the Node this daemon runs on
	// PodUID is the uid of the daemon's Pod, sent with each heartbeat: the
	// agent refuses a key issued to another Pod (one that ran on this Node
	// before and left its key on the host), and the daemon joins again with
	// its own Pod token. Empty: not sent.
	PodUID string
	Log    zerolog.Logger
	Clock  clock.Clock
	// Redactor learns the token and the node key as they are read, so the
	// log behind it can never show them; nil: none.
	Redactor *secrets.Redactor
	// RootCAs replaces the system roots when there are no pins (tests);
	// nil: the system's.
	RootCAs *x509.CertPool
	// MinBackoff and MaxBackoff bound the wait between failed attempts
	// (defaults 1 s and 60 s): it doubles from the first to the second,
	// with jitter, and starts over after a success.
	MinBackoff, MaxBackoff time.Duration
	// Poll is how often a missing config or token file is looked for
	// again (default 5 s: the kubelet updates a mounted Secret within a
	// minute or so, and a look costs a stat).
	Poll time.Duration
	// RequestTimeout bounds one call to the listener (default 10 s).
	RequestTimeout time.Duration
	// OnStatus, when set, is told every status (tests, a probe).
	OnStatus func(Status)
}

// savedKey is the node key file in the state directory.
type savedKey struct {
	PoolID         string    `json:"poolId"`
	NodeName       string    `json:"nodeName"`
	NodeKey        string    `json:"nodeKey"`
	HeartbeatEvery string    `json:"heartbeatEvery"`
	JoinedAt       time.Time `json:"joinedAt"`
}

// nodeConfig is the ConfigMap as mounted.
type nodeConfig struct {
	poolID  string
	joinURL *url.URL
	pins    []string
}

type daemon struct {
	o      DaemonOptions
	log    zerolog.Logger
	clock  clock.Clock
	failed int // failures in a row, for the backoff

	client    *http.Client
	clientFor string

	key *savedKey
	// refused is the hash of the token the agent last refused and when:
	// the same token is not sent again until MaxBackoff passed (it will not
	// start working; the Secret gets a new one).
	refused   string
	refusedAt time.Time

	last       Status
	lastLogged time.Time
	warnedHTTP bool
}

// RunDaemon is the node daemon: it joins the pool with the token file and
// heartbeats with the node key it got, keeping the key in the state
// directory so a restart heartbeats instead of joining again. It retries
// everything (a missing file, a refusal, an unreachable agent) and says what
// is wrong; it returns only when ctx ends.
func RunDaemon(ctx context.Context, o DaemonOptions) error {
	if o.ConfigDir == "" {
		o.ConfigDir = DefaultConfigDir
	}
	if o.TokenFile == "" {
		o.TokenFile = DefaultTokenFile
	}
	if o.PodTokenFile == "" {
		o.PodTokenFile = DefaultPodTokenFile
	}
	if o.StateDir == "" {
		o.StateDir = DefaultStateDir
	}
	if o.Clock == nil {
		o.Clock = clock.Real{}
	}
	if o.MinBackoff <= 0 {
		o.MinBackoff = time.Second
	}
	if o.MaxBackoff <= 0 {
		o.MaxBackoff = 60 * time.Second
	}
	if o.MaxBackoff < o.MinBackoff {
		o.MaxBackoff = o.MinBackoff
	}
	if o.Poll <= 0 {
		o.Poll = 5 * time.Second
	}
	if o.RequestTimeout <= 0 {
		o.RequestTimeout = 10 * time.Second
	}
	d := &daemon{o: o, log: o.Log, clock: o.Clock}
	d.log.Info().Str("node", o.NodeName).Str("configDir", o.ConfigDir).Str("tokenFile", o.TokenFile).Str("stateDir", o.StateDir).
		Msg("fleet-agent node starting")
	for ctx.Err() == nil {
		wait := d.step(ctx)
		select {
		case <-ctx.Done():
			d.log.Info().Msg("fleet-agent node stopping")
			return nil
		case <-d.clock.After(wait):
		}
	}
	return nil
}

// backoff is the wait after a failure: doubling from MinBackoff to
// MaxBackoff, each wait drawn in its upper half so that daemons that failed
// together do not all come back together.
func (d *daemon) backoff() time.Duration {
	d.failed++
	return backoff.Wait(d.failed, d.o.MinBackoff, d.o.MaxBackoff, backoff.Random)
}

// say reports a status, and logs it when it changed (or every five minutes
// while it lasts, so that a look at the recent log shows it).
func (d *daemon) say(s Status) {
	if d.o.OnStatus != nil {
		d.o.OnStatus(s)
	}
	now := d.clock.Now()
	if s == d.last && now.Sub(d.lastLogged) < 5*time.Minute {
		return
	}
	d.last, d.lastLogged = s, now
	ev := d.log.Warn()
	if s.Phase == PhaseJoined || s.Phase == PhaseConnected {
		ev = d.log.Info()
	}
	if s.Code != "" {
		ev = ev.Str("code", s.Code)
	}
	ev.Str("phase", string(s.Phase)).Msg(s.Message)
}

// step does one thing and says how long to wait before the next.
func (d *daemon) step(ctx context.Context) time.Duration {
	cfg, err := d.readConfig()
	if err != nil {
		d.say(Status{Phase: PhaseWaitingForConfig, Message: err.Error()})
		return d.o.Poll
	}
	if cfg.joinURL.Scheme == "http" && !d.warnedHTTP {
		d.warnedHTTP = true
		d.log.Warn().Str("joinURL", cfg.joinURL.String()).Msg("the join URL is plain http: the join token and the node key cross the network in clear (a listener with insecure: true is for tests)")
	}
	d.ensureClient(cfg)
	if d.key == nil {
		d.key = d.loadKey()
	}
	if k := d.key; k != nil && k.PoolID == cfg.poolID && k.NodeName == d.o.NodeName {
		return d.heartbeat(ctx, cfg, k)
	}
	return d.join(ctx, cfg)
}

func (d *daemon) readConfig() (nodeConfig, error) {
	var c nodeConfig
	read := func(key string, required bool) (string, error) {
		b, err := os.ReadFile(filepath.Join(d.o.ConfigDir, key))
		if errors.Is(err, fs.ErrNotExist) && !required {
			return "", nil
		}
		if err != nil {
			return "", fmt.Errorf("cannot read %s (key %s of the ConfigMap %s, mounted at %s): %v; waiting for it", filepath.Join(d.o.ConfigDir, key), key, configMapName, d.o.ConfigDir, err)
		}
		return strings.TrimSpace(string(b)), nil
	}
	name := d.o.NodeName
	if !validNodeName(name) {
		return c, fmt.Errorf("the Node name %q is not a Kubernetes Node name: the DaemonSet sets %s from the downward API (fieldRef spec.nodeName), or pass --node-name", name, NodeNameEnv)
	}
	pool, err := read(KeyPoolID, true)
	if err != nil {
		return c, err
	}
	if !validPoolID(pool) {
		return c, fmt.Errorf("%s holds %q, not a pool id (key %s of the ConfigMap %s)", filepath.Join(d.o.ConfigDir, KeyPoolID), clip(pool, 64), KeyPoolID, configMapName)
	}
	raw, err := read(KeyJoinURL, true)
	if err != nil {
		return c, err
	}
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" || (u.Scheme != "https" && u.Scheme != "http") || u.User != nil {
		return c, fmt.Errorf("%s holds %q, not the join listener's URL (https://host:port/; key %s of the ConfigMap %s, from substrate.nodeDaemon.joinURL)", filepath.Join(d.o.ConfigDir, KeyJoinURL), clip(raw, 256), KeyJoinURL, configMapName)
	}
	pinsRaw, err := read(KeyCAPins, false)
	if err != nil {
		return c, err
	}
	var pins []string
	if pinsRaw != "" {
		if err := json.Unmarshal([]byte(pinsRaw), &pins); err != nil {
			return c, fmt.Errorf("%s is not a JSON list of pins (key %s of the ConfigMap %s): %v", filepath.Join(d.o.ConfigDir, KeyCAPins), KeyCAPins, configMapName, err)
		}
	}
	for _, p := range pins {
		if !checkPin(p) {
			return c, fmt.Errorf("%s holds %q, not a pin (sha256/ and 44 characters of base64; key %s of the ConfigMap %s)", filepath.Join(d.o.ConfigDir, KeyCAPins), clip(p, 64), KeyCAPins, configMapName)
		}
	}
	c.poolID, c.joinURL, c.pins = pool, u, pins
	return c, nil
}

// ensureClient makes the HTTP client for the config's URL and pins. It
// keeps no connection alive (see Limits), follows no redirect (a redirect
// would carry the token elsewhere) and retries nothing itself.
func (d *daemon) ensureClient(c nodeConfig) {
	id := c.joinURL.String() + " " + strings.Join(c.pins, " ")
	if d.client != nil && d.clientFor == id {
		return
	}
	var tc *tls.Config
	if len(c.pins) > 0 {
		tc = pinnedTLS(c.pins, c.joinURL.Hostname())
	} else {
		tc = &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: d.o.RootCAs, ClientSessionCache: tls.NewLRUClientSessionCache(4)}
	}
	d.client = &http.Client{
		Timeout: d.o.RequestTimeout,
		Transport: &http.Transport{Proxy: http.ProxyFromEnvironment, TLSClientConfig: tc, DisableKeepAlives: true,
			TLSHandshakeTimeout: d.o.RequestTimeout, ResponseHeaderTimeout: d.o.RequestTimeout},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	d.clientFor = id
}

// answer is what a call to the listener got.
type answer struct {
	status     int
	body       []byte
	refusal    Refusal
	retryAfter time.Duration
}

func (d *daemon) call(ctx context.Context, c nodeConfig, path string, body any, bearer string) (answer, error) {
	data, err := json.Marshal(body)
	if err != nil {
		return answer{}, err
	}
	target := c.joinURL.JoinPath(path)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, target.String(), bytes.NewReader(data))
	if err != nil {
		return answer{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	resp, err := d.client.Do(req)
	if err != nil {
		return answer{}, err
	}
	defer resp.Body.Close()
	a := answer{status: resp.StatusCode}
	a.body, err = io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		return answer{}, err
	}
	if resp.StatusCode >= 400 {
		_ = json.Unmarshal(a.body, &a.refusal)
	}
	if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && s > 0 {
		a.retryAfter = time.Duration(s) * time.Second
	}
	return a, nil
}

// retryWait is the backoff, at most ceiling when it is set.
func (d *daemon) retryWait(ceiling time.Duration) time.Duration {
	wait := d.backoff()
	if ceiling > 0 {
		wait = min(wait, ceiling)
	}
	return wait
}

// unreachable says why a call failed on the way and how long to wait (at
// most ceiling, when set).
func (d *daemon) unreachable(c nodeConfig, what string, err error, ceiling time.Duration) time.Duration {
	wait := d.retryWait(ceiling)
	if ue, ok := errors.AsType[*url.Error](err); ok {
		err = ue.Err // the URL is in the message already
	}
	if pm, ok := errors.AsType[*PinMismatchError](err); ok {
		d.say(Status{Phase: PhasePinMismatch, Retry: wait, Message: fmt.Sprintf("cannot %s at %s: %v; retrying in %s", what, c.joinURL, pm, roundWait(wait))})
		return wait
	}
	if ps, ok := untrusted(err); ok && len(c.pins) == 0 {
		d.say(Status{Phase: PhasePinMismatch, Retry: wait, Message: fmt.Sprintf(
			"cannot %s at %s: the system roots do not trust the join listener's certificate (%v); it presented %s; set substrate.nodeDaemon.caPins to its pin, or give the listener a certificate the nodes trust; retrying in %s",
			what, c.joinURL, err, describe(ps), roundWait(wait))})
		return wait
	}
	d.say(Status{Phase: PhaseUnreachable, Retry: wait, Message: fmt.Sprintf("cannot reach the join listener at %s to %s: %v; retrying in %s (is fleet-agent run up with substrate.join, and substrate.nodeDaemon.joinURL right?)",
		c.joinURL, what, err, roundWait(wait))})
	return wait
}

// busy handles an answer the listener gave that is neither a success nor
// a refusal of what the daemon sent: 429, 5xx, anything unexpected. The
// listener's Retry-After wins over the ceiling.
func (d *daemon) busy(c nodeConfig, what string, a answer, ceiling time.Duration) time.Duration {
	wait := max(d.retryWait(ceiling), a.retryAfter)
	msg := fmt.Sprintf("the join listener at %s answered %d to %s", c.joinURL, a.status, what)
	if a.refusal.Code != "" {
		msg += fmt.Sprintf(" (%s: %s)", a.refusal.Code, a.refusal.Reason)
	}
	d.say(Status{Phase: PhaseUnreachable, Code: a.refusal.Code, Retry: wait, Message: fmt.Sprintf("%s; retrying in %s", msg, roundWait(wait))})
	return wait
}

func (d *daemon) join(ctx context.Context, c nodeConfig) time.Duration {
	raw, err := os.ReadFile(d.o.TokenFile)
	token := strings.TrimSpace(string(raw))
	// The Pod's token is the one the agent checks first (with the
	// cluster): the Secret's, when there is one, goes with it as the
	// fallback where the agent cannot review it.
	podRaw, podErr := os.ReadFile(d.o.PodTokenFile)
	podToken := strings.TrimSpace(string(podRaw))
	if podErr != nil && !errors.Is(podErr, fs.ErrNotExist) {
		d.log.Warn().Err(podErr).Str("file", d.o.PodTokenFile).Msg("cannot read the Pod's token; joining with the join token alone")
	}
	if (err != nil || token == "") && podToken == "" {
		why := "no file there yet"
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			why = err.Error()
		} else if err == nil {
			why = "the file is empty"
		}
		d.say(Status{Phase: PhaseWaitingForToken, Message: fmt.Sprintf(
			"waiting for the join token at %s (%s): the agent writes it to the Secret %s (key token) while this Node (%s) waits to join pool %s; nor is there a Pod token at %s (the DaemonSet's projected volume)",
			d.o.TokenFile, why, secretName, d.o.NodeName, c.poolID, d.o.PodTokenFile)})
		return d.o.Poll
	}
	if d.o.Redactor != nil {
		if token != "" {
			d.o.Redactor.Add(token)
		}
		if podToken != "" {
			d.o.Redactor.Add(podToken)
		}
	}
	tokenHash := hashOf(podToken + " " + token)
	if tokenHash == d.refused && d.clock.Now().Sub(d.refusedAt) < d.o.MaxBackoff {
		// The same tokens again: wait for the Secret (or the kubelet's
		// renewed Pod token) to change.
		return d.o.Poll
	}
	a, err := d.call(ctx, c, JoinPath, joinRequest{PoolID: c.poolID, NodeName: d.o.NodeName, Token: token, PodToken: podToken}, "")
	if err != nil {
		if ctx.Err() != nil {
			return 0
		}
		return d.unreachable(c, "join", err, 0)
	}
	switch a.status {
	case http.StatusOK:
		var ans joinAnswer
		if err := json.Unmarshal(a.body, &ans); err != nil || ans.NodeKey == "" {
			return d.busy(c, "the join (an answer without a node key)", a, 0)
		}
		if d.o.Redactor != nil {
			d.o.Redactor.Add(ans.NodeKey)
		}
		k := &savedKey{PoolID: c.poolID, NodeName: d.o.NodeName, NodeKey: ans.NodeKey, HeartbeatEvery: ans.HeartbeatEvery, JoinedAt: d.clock.Now().UTC()}
		d.key, d.failed, d.refused = k, 0, ""
		msg := fmt.Sprintf("joined pool %s as Node %s through %s", c.poolID, d.o.NodeName, c.joinURL)
		if err := d.saveKey(k); err != nil {
			msg += fmt.Sprintf("; the node key could not be kept in %s (%v): a restart will need a join token again", d.o.StateDir, err)
		}
		d.say(Status{Phase: PhaseJoined, Message: msg})
		// The first heartbeat at once: the agent counts the node connected
		// from it, not a whole period later.
		return 0
	}
	if code := a.refusal.Code; code == CodePodTokenRefused || code == CodePodOtherNode {
		d.refused, d.refusedAt = tokenHash, d.clock.Now()
		wait := d.backoff()
		d.say(Status{Phase: PhaseRefused, Code: a.refusal.Code, Retry: wait, Message: fmt.Sprintf(
			"the agent refused this Pod's token (at %s) for Node %s: %s (%s); the DaemonSet mounts it (audience %s) and the kubelet renews it; this daemon tries again when it changes",
			d.o.PodTokenFile, d.o.NodeName, a.refusal.Reason, a.refusal.Code, PodAudience)})
		return wait
	}
	switch a.status {
	case http.StatusUnauthorized:
		d.refused, d.refusedAt = tokenHash, d.clock.Now()
		wait := d.backoff()
		d.say(Status{Phase: PhaseRefused, Code: a.refusal.Code, Retry: wait, Message: fmt.Sprintf(
			"the agent refused the join token in the Secret %s (at %s): %s (%s); the agent writes a new token there while this Node waits to join, and this daemon tries again when it changes",
			secretName, d.o.TokenFile, a.refusal.Reason, a.refusal.Code)})
		return wait
	case http.StatusForbidden:
		d.refused, d.refusedAt = tokenHash, d.clock.Now()
		wait := d.backoff()
		d.say(Status{Phase: PhaseRefused, Code: a.refusal.Code, Retry: wait, Message: fmt.Sprintf(
			"the agent does not let Node %s join pool %s with the token in the Secret %s: %s (%s); the agent lists only the Nodes labelled fleet-agent.dev/substrate-pool=%s, and %s must be this Pod's spec.nodeName",
			d.o.NodeName, c.poolID, secretName, a.refusal.Reason, a.refusal.Code, c.poolID, NodeNameEnv)})
		return wait
	case http.StatusBadRequest:
		wait := d.backoff()
		d.say(Status{Phase: PhaseRefused, Code: a.refusal.Code, Retry: wait, Message: fmt.Sprintf("the agent refused the join request: %s (%s); retrying in %s", a.refusal.Reason, a.refusal.Code, roundWait(wait))})
		return wait
	}
	return d.busy(c, "the join", a, 0)
}

func (d *daemon) heartbeat(ctx context.Context, c nodeConfig, k *savedKey) time.Duration {
	a, err := d.call(ctx, c, HeartbeatPath, heartbeatRequest{PoolID: c.poolID, NodeName: d.o.NodeName, PodUID: d.o.PodUID}, k.NodeKey)
	if err != nil {
		if ctx.Err() != nil {
			return 0
		}
		// Never longer than a beat: once the agent is back, the node is
		// connected again within heartbeatEvery, not a whole backoff later.
		return d.unreachable(c, "heartbeat", err, every(k))
	}
	switch a.status {
	case http.StatusNoContent, http.StatusOK:
		d.failed = 0
		d.say(Status{Phase: PhaseConnected, Message: fmt.Sprintf("connected to pool %s as Node %s (a heartbeat every %s)", c.poolID, d.o.NodeName, every(k))})
		return every(k)
	case http.StatusUnauthorized, http.StatusForbidden:
		// The key is dead (the node was retired) or not this node's (a
		// state directory from another Node): drop it and join again.
		d.key = nil
		if err := os.Remove(filepath.Join(d.o.StateDir, keyFileName)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			d.log.Warn().Err(err).Msg("cannot remove the refused node key")
		}
		if a.refusal.Code == CodeKeyOtherPod {
			d.say(Status{Phase: PhaseRefused, Code: a.refusal.Code, Message: fmt.Sprintf(
				"the node key in %s was issued to another Pod on this Node (this Pod is %s): %s (%s); joining again with this Pod's token (%s)",
				d.o.StateDir, d.o.PodUID, a.refusal.Reason, a.refusal.Code, d.o.PodTokenFile)})
			return 0
		}
		d.say(Status{Phase: PhaseRefused, Code: a.refusal.Code, Message: fmt.Sprintf(
			"the agent refused this node's key: %s (%s); joining again with the token in the Secret %s", a.refusal.Reason, a.refusal.Code, secretName)})
		return 0
	}
	return d.busy(c, "a heartbeat", a, every(k))
}

// roundWait is a wait as a message shows it.
func roundWait(d time.Duration) time.Duration {
	if d < time.Second {
		return d.Round(time.Millisecond)
	}
	return d.Round(time.Second)
}

// every is the heartbeat period the agent asked for, within bounds that
// keep a node connected (under a minute) and the listener unhurried.
func every(k *savedKey) time.Duration {
	e, err := time.ParseDuration(k.HeartbeatEvery)
	if err != nil || e <= 0 {
		return DefaultHeartbeatEvery
	}
	return min(max(e, 10*time.Millisecond), time.Minute)
}

func (d *daemon) loadKey() *savedKey {
	path := filepath.Join(d.o.StateDir, keyFileName)
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	var k savedKey
	if err == nil {
		err = json.Unmarshal(data, &k)
	}
	if err != nil || k.NodeKey == "" {
		d.log.Warn().Str("file", path).Msg("the node key file is unreadable; removed, joining again")
		_ = os.Remove(path)
		return nil
	}
	if d.o.Redactor != nil {
		d.o.Redactor.Add(k.NodeKey)
	}
	return &k
}

// saveKey writes the key file whole or not at all (a temporary file of mode
// 0600, synced, renamed, the directory synced) in a directory of mode 0700.
func (d *daemon) saveKey(k *savedKey) error {
	if err := os.MkdirAll(d.o.StateDir, 0o700); err != nil {
		return err
	}
	data, err := json.Marshal(k)
	if err != nil {
		return err
	}
	f, err := os.CreateTemp(d.o.StateDir, keyFileName+".*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name()) // nothing is left to remove after the rename
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), filepath.Join(d.o.StateDir, keyFileName))
	}
	if err != nil {
		return err
	}
	if dir, err := os.Open(d.o.StateDir); err == nil {
		defer dir.Close()
		return dir.Sync()
	}
	return nil
}
