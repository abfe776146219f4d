package incluster

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fleet-agent/fleet-agent/internal/config"
	"github.com/fleet-agent/fleet-agent/internal/providers"
	"github.com/fleet-agent/fleet-agent/internal/state"
	"github.com/fleet-agent/fleet-agent/internal/substrate/join"
)

// TestPodTokenBindsTheNode, on the real control plane: two Pods of the
// node daemon on two Nodes of the pool, each with a token the API server
// issued for its Pod (as the kubelet's projected volume gets it). Pod A's
// token joins as Node A and only as Node A: asking for Node B's name is
// refused and changes nothing, and A's node key beats as A only. Tokens the
// cluster does not vouch for are refused: the API's audience, a Pod that is
// not the node daemon's, a token bound to no Pod, a token whose Pod is gone.
// A node daemon given only its Pod token joins and is connected at once.
// The key is the Pod's: the state file holds its uid; from another Pod it
// is refused, as are A's token replayed while A is connected and a second
// Pod on A's Node while A runs; once A is gone, its successor A2 (which
// finds A's key on the host) is refused the key, joins with its own token
// and takes Node A over.
func TestPodTokenBindsTheNode(t *testing.T) {
	p := kube(t)
	ctx := t.Context()
	kc := p.Client()
	c := newCluster(t, p)
	u := p.Unique(t)
	pool := "pool_" + strings.ReplaceAll(u, "-", "")
	label := map[string]string{providers.LabelSubstratePool: pool}
	a, b := u+"-a", u+"-b"
	p.AddNodeT(t, a, label)
	p.AddNodeT(t, b, label)

	// The node daemon's Namespace and its default ServiceAccount (the
	// serviceaccount controller makes it).
	deadline := time.Now().Add(60 * time.Second)
	for {
		ns, err := kc.CoreV1().Namespaces().Get(ctx, Namespace, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			_, err = kc.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: Namespace}}, metav1.CreateOptions{})
		}
		if err == nil && (ns == nil || ns.Status.Phase != corev1.NamespaceTerminating) {
			if _, err = kc.CoreV1().ServiceAccounts(Namespace).Get(ctx, "default", metav1.GetOptions{}); err == nil {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no Namespace %s with its default ServiceAccount within 60 s: %v", Namespace, err)
		}
		time.Sleep(100 * time.Millisecond) // polling the controllers
	}
	pod := func(name, node string, labels map[string]string) *corev1.Pod {
		t.Helper()
		no := false
		pd := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: Namespace, Labels: labels},
			Spec: corev1.PodSpec{NodeName: node, AutomountServiceAccountToken: &no,
				Containers: []corev1.Container{{Name: "fleet-node", Image: "registry.example.com/fleet-agent:test"}}}}
		got, err := kc.CoreV1().Pods(Namespace).Create(ctx, pd, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			zero := int64(0)
			_ = kc.CoreV1().Pods(Namespace).Delete(context.Background(), name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
		})
		return got
	}
	podA, podB := pod(u+"-pa", a, podLabels(pool)), pod(u+"-pb", b, podLabels(pool))
	stranger := pod(u+"-px", a, map[string]string{"app": "not-ours"})
	token := func(audience string, bound *corev1.Pod) string {
		t.Helper()
		secs := int64(join.PodTokenSeconds)
		req := &authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{Audiences: []string{audience}, ExpirationSeconds: &secs}}
		if bound != nil {
			req.Spec.BoundObjectRef = &authnv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: bound.Name, UID: bound.UID}
		}
		tr, err := kc.CoreV1().ServiceAccounts(Namespace).CreateToken(ctx, "default", req, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return tr.Status.Token
	}
	tokA, tokB := token(join.PodAudience, podA), token(join.PodAudience, podB)

	// The agent's side: the join store with the reviewer over the run's
	// credential, and the listener on loopback.
	st, err := state.Open(filepath.Join(t.TempDir(), "state.db"), state.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	joins := join.NewStore(st, join.StoreOptions{})
	reviewer := NewPodTokens(nil)
	reviewer.Track(c.target(pool, "adopt"))
	joins.SetReviewer(reviewer)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	lctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- join.NewListener(join.ListenerOptions{Store: joins, Log: zerolog.Nop(), HeartbeatEvery: time.Hour}).
			ServeOn(lctx, ln, config.Join{Listen: ln.Addr().String(), Insecure: true})
	}()
	t.Cleanup(func() { stop(); <-done })
	url := "http://" + ln.Addr().String()
	post := func(path string, body any, bearer string) (int, string) {
		t.Helper()
		data, _ := json.Marshal(body)
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url+path, strings.NewReader(string(data)))
		if bearer != "" {
			req.Header.Set("Authorization", "Bearer "+bearer)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		out, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(out)
	}
	joinAs := func(node, podToken string) (int, string) {
		return post(join.JoinPath, map[string]string{"poolId": pool, "nodeName": node, "podToken": podToken}, "")
	}
	joined := func() []string {
		t.Helper()
		nodes, err := joins.Joined(ctx, pool)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, n := range nodes {
			names = append(names, n.Name)
		}
		return names
	}

	// Pod A's token cannot take Node B's name.
	if status, body := joinAs(b, tokA); status != 403 || !strings.Contains(body, join.CodePodOtherNode) {
		t.Fatalf("pod A's token as Node B: %d %s", status, body)
	}
	if names := joined(); len(names) != 0 {
		t.Fatalf("joined after a refusal: %v", names)
	}
	// It joins as Node A, and A's key beats as A only.
	status, body := joinAs(a, tokA)
	var ans struct{ NodeKey string }
	if err := json.Unmarshal([]byte(body), &ans); status != 200 || err != nil || ans.NodeKey == "" {
		t.Fatalf("pod A's token as Node A: %d %s", status, body)
	}
	if status, _ := post(join.HeartbeatPath, map[string]string{"poolId": pool, "nodeName": a}, ans.NodeKey); status != 204 {
		t.Fatalf("A's heartbeat: %d", status)
	}
	if status, body := post(join.HeartbeatPath, map[string]string{"poolId": pool, "nodeName": b}, ans.NodeKey); status != 403 || !strings.Contains(body, join.CodeKeyOtherNode) {
		t.Fatalf("A's key as B: %d %s", status, body)
	}
	if names := joined(); strings.Join(names, ",") != a {
		t.Fatalf("joined: %v", names)
	}

	// The key is Pod A's: the state file ties it to A's uid.
	podUIDOf := func(node string) string {
		t.Helper()
		var n *state.JoinedNode
		if err := st.View(func(tx *state.Tx) (err error) { n, err = tx.JoinedNode(pool, node); return }); err != nil || n == nil {
			t.Fatalf("the joined node %s: %v %v", node, n, err)
		}
		return n.PodUID
	}
	if got := podUIDOf(a); got != string(podA.UID) {
		t.Fatalf("Node A's record holds Pod uid %q, want Pod A's %q", got, podA.UID)
	}
	beatAs := func(node, key, podUID string) (int, string) {
		return post(join.HeartbeatPath, map[string]string{"poolId": pool, "nodeName": node, "podUid": podUID}, key)
	}
	// A's key from another Pod (B's identity) is refused; from A it beats.
	if status, body := beatAs(a, ans.NodeKey, string(podB.UID)); status != 403 || !strings.Contains(body, join.CodeKeyOtherPod) {
		t.Fatalf("A's key with Pod B's uid: %d %s", status, body)
	}
	if status, body := beatAs(a, ans.NodeKey, string(podA.UID)); status != 204 {
		t.Fatalf("A's key with Pod A's uid: %d %s", status, body)
	}
	// Pod B's token cannot take A's name; A's token replayed while A's
	// daemon is connected cannot take the key from it; nor can a second
	// node daemon Pod on Node A while Pod A runs.
	podA2 := pod(u+"-pa2", a, podLabels(pool))
	tokA2 := token(join.PodAudience, podA2)
	for _, tc := range []struct {
		what, token string
		status      int
		code        string
	}{
		{"Pod B's token as Node A", tokB, 403, join.CodePodOtherNode},
		{"Pod A's token replayed while A is connected", tokA, 409, join.CodeNodeHeld},
		{"a second Pod on Node A while Pod A runs", tokA2, 409, join.CodeNodeHeld},
	} {
		if status, body := joinAs(a, tc.token); status != tc.status || !strings.Contains(body, tc.code) {
			t.Errorf("%s: %d %s, want %d %s", tc.what, status, body, tc.status, tc.code)
		}
	}
	if status, _ := beatAs(a, ans.NodeKey, string(podA.UID)); status != 204 || podUIDOf(a) != string(podA.UID) {
		t.Fatalf("after the refused joins, A's key beats %d and the record holds %q", status, podUIDOf(a))
	}

	// Tokens the cluster does not vouch for.
	for _, tc := range []struct {
		what, node, token string
	}{
		{"the API's audience", a, token("https://kubernetes.default.svc", podA)},
		{"a Pod that is not the node daemon's", a, token(join.PodAudience, stranger)},
		{"a token bound to no Pod", a, token(join.PodAudience, nil)},
		{"not a token", a, "eyJhbGciOiJub25lIn0.eyJhdWQiOiJmbGVldC1hZ2VudC5kZXYvam9pbiIsImV4cCI6OTk5OTk5OTk5OX0.x"},
	} {
		if status, body := joinAs(tc.node, tc.token); status != 401 || !strings.Contains(body, join.CodePodTokenRefused) {
			t.Errorf("%s: %d %s", tc.what, status, body)
		}
	}

	// A node daemon with only its Pod token (as the DaemonSet mounts it).
	root := t.TempDir()
	cfgDir := filepath.Join(root, "config")
	_ = os.MkdirAll(cfgDir, 0o700)
	for k, v := range map[string]string{join.KeyPoolID: pool, join.KeyJoinURL: url + "/"} {
		if err := os.WriteFile(filepath.Join(cfgDir, k), []byte(v), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	podTok := filepath.Join(root, "pod", "token")
	_ = os.MkdirAll(filepath.Dir(podTok), 0o700)
	if err := os.WriteFile(podTok, []byte(tokB), 0o400); err != nil {
		t.Fatal(err)
	}
	phases := make(chan join.Status, 64)
	dctx, dstop := context.WithCancel(context.Background())
	ddone := make(chan struct{})
	go func() {
		defer close(ddone)
		_ = join.RunDaemon(dctx, join.DaemonOptions{ConfigDir: cfgDir, TokenFile: filepath.Join(root, "join", "token"), PodTokenFile: podTok,
			StateDir: filepath.Join(root, "state"), NodeName: b, Log: zerolog.Nop(), MinBackoff: 50 * time.Millisecond, MaxBackoff: 200 * time.Millisecond,
			Poll: 50 * time.Millisecond, OnStatus: func(s join.Status) {
				select {
				case phases <- s:
				default:
				}
			}})
	}()
	t.Cleanup(func() { dstop(); <-ddone })
	wait := time.After(30 * time.Second)
	for connected := false; !connected; {
		select {
		case s := <-phases:
			connected = s.Phase == join.PhaseConnected
			if s.Phase == join.PhaseRefused || s.Phase == join.PhaseWaitingForToken {
				t.Fatalf("the daemon on Node B: %s: %s", s.Phase, s.Message)
			}
		case <-wait:
			t.Fatal("the daemon on Node B with its Pod token was not connected within 30 s (the heartbeat period is an hour: the first beat must come at once)")
		}
	}
	if names := joined(); strings.Join(names, ",") != a+","+b {
		t.Fatalf("joined: %v", names)
	}

	// Pod A gone: its token no longer joins.
	zero := int64(0)
	if err := kc.CoreV1().Pods(Namespace).Delete(ctx, podA.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		t.Fatal(err)
	}
	deadline = time.Now().Add(30 * time.Second)
	for {
		status, body := joinAs(a, tokA)
		if status == 401 && strings.Contains(body, join.CodePodTokenRefused) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the token of a deleted Pod still joins after 30 s: %d %s", status, body)
		}
		time.Sleep(200 * time.Millisecond) // polling the Pod's deletion
	}

	// Pod A2 is Node A's daemon now (A was restarted as A2). It finds Pod
	// A's key in the host's state directory, as a restarted Pod does: its
	// heartbeat is refused (another Pod's key), and it joins with its own
	// token, which takes Node A over; A's key stops working.
	stateA := filepath.Join(root, "state-a")
	_ = os.MkdirAll(stateA, 0o700)
	left, _ := json.Marshal(map[string]string{"poolId": pool, "nodeName": a, "nodeKey": ans.NodeKey, "heartbeatEvery": "1h", "joinedAt": time.Now().UTC().Format(time.RFC3339)})
	if err := os.WriteFile(filepath.Join(stateA, "node.json"), left, 0o600); err != nil {
		t.Fatal(err)
	}
	podTokA2 := filepath.Join(root, "pod-a2", "token")
	_ = os.MkdirAll(filepath.Dir(podTokA2), 0o700)
	if err := os.WriteFile(podTokA2, []byte(tokA2), 0o400); err != nil {
		t.Fatal(err)
	}
	phasesA2 := make(chan join.Status, 64)
	a2ctx, a2stop := context.WithCancel(context.Background())
	a2done := make(chan struct{})
	go func() {
		defer close(a2done)
		_ = join.RunDaemon(a2ctx, join.DaemonOptions{ConfigDir: cfgDir, TokenFile: filepath.Join(root, "join", "token"), PodTokenFile: podTokA2,
			StateDir: stateA, NodeName: a, PodUID: string(podA2.UID), Log: zerolog.Nop(), MinBackoff: 50 * time.Millisecond, MaxBackoff: 200 * time.Millisecond,
			Poll: 50 * time.Millisecond, OnStatus: func(s join.Status) {
				select {
				case phasesA2 <- s:
				default:
				}
			}})
	}()
	t.Cleanup(func() { a2stop(); <-a2done })
	var saw []string
	wait = time.After(30 * time.Second)
	for connected := false; !connected; {
		select {
		case s := <-phasesA2:
			saw = append(saw, string(s.Phase)+" "+s.Code)
			connected = s.Phase == join.PhaseConnected
		case <-wait:
			t.Fatalf("Pod A2's daemon was not connected as Node A within 30 s; it said %v", saw)
		}
	}
	if len(saw) < 3 || saw[0] != string(join.PhaseRefused)+" "+join.CodeKeyOtherPod || saw[len(saw)-2] != string(join.PhaseJoined)+" " {
		t.Errorf("Pod A2's daemon said %v; want refused %s, then joined, then connected", saw, join.CodeKeyOtherPod)
	}
	if got := podUIDOf(a); got != string(podA2.UID) {
		t.Errorf("Node A's record holds Pod uid %q after A2 joined, want A2's %q", got, podA2.UID)
	}
	if status, body := beatAs(a, ans.NodeKey, string(podA.UID)); status != 401 || !strings.Contains(body, join.CodeKeyUnknown) {
		t.Errorf("Pod A's key after A2 took Node A: %d %s", status, body)
	}
	t.Logf("TokenReviews made by the plane's webhook (credentials): %d", p.TokenReviews())
}
