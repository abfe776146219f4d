package forge

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"
)

// MaxWebhookBody is the largest delivery read: GitHub caps payloads at 25 MiB.
const MaxWebhookBody = 25 << 20

// SignatureHeader carries HMAC-SHA256 of the raw body, "sha256=" and hex.
const SignatureHeader = "X-Hub-Signature-256"

// MaxWebhookInFlight bounds the deliveries read at once; one more is
// answered 503 at once rather than queued, so a flood costs a fixed amount
// of memory and GitHub retries what it must.
const MaxWebhookInFlight = 8

// WebhookReadTimeout is the longest a delivery's body may take to arrive:
// a body trickled in a byte at a time cannot hold a slot longer.
const WebhookReadTimeout = 20 * time.Second

// recentDeliveries is how many delivery ids are remembered to drop replays.
const recentDeliveries = 1024

// WebhookHandler serves POST /hooks/github: a delivery whose signature checks
// out calls wake, and that is all it does; the payload is not read for
// anything, since the agent learns what moved from git and the API. wake
// must not block (a non-blocking send on a buffered channel, say).
//
// The body is never held: it streams into the HMAC under the 25 MiB cap and
// is dropped, so a delivery costs a copy buffer whatever its size. At most
// MaxWebhookInFlight deliveries are read at once, each within
// WebhookReadTimeout. A verified delivery whose X-GitHub-Delivery id was
// seen among the last 1,024 is answered 200 and does not wake the agent
// (the memory is not persisted: after a restart the agent polls anyway).
//
// Answers: 204 delivered, 200 a replayed delivery id (dropped), 401
// signature bad or missing, 405 not a POST, 413 body over 25 MiB, 408 body
// too slow, 503 too many deliveries at once or the secret does not resolve.
// The secret is resolved for each delivery.
func WebhookHandler(r Resolver, secretRef string, wake func(), log *slog.Logger) http.Handler {
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return &webhook{r: r, ref: secretRef, wake: wake, log: log,
		slots: make(chan struct{}, MaxWebhookInFlight), seen: map[string]struct{}{}}
}

// WebhookHandler is the package's WebhookHandler with this forge's secret,
// resolver and log; it answers 404 when no webhook secret is configured.
func (g *GitHub) WebhookHandler(wake func()) http.Handler {
	if g.cfg.WebhookSecret == "" {
		return http.NotFoundHandler()
	}
	return WebhookHandler(g.cfg.Resolver, g.cfg.WebhookSecret, wake, g.log)
}

type webhook struct {
	r     Resolver
	ref   string
	wake  func()
	log   *slog.Logger
	slots chan struct{}

	mu    sync.Mutex
	seen  map[string]struct{}
	order []string // ring of the ids in seen, oldest at next
	next  int
}

func (h *webhook) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if req.Method != http.MethodPost {
		refuseUnread(w)
		w.Header().Set("Allow", http.MethodPost)
		http.Error(w, "only POST", http.StatusMethodNotAllowed)
		return
	}
	delivery := req.Header.Get("X-GitHub-Delivery")
	sig := req.Header.Get(SignatureHeader)
	if sig == "" {
		refuseUnread(w)
		h.log.Warn("github webhook refused: no signature", "delivery", delivery)
		http.Error(w, "missing "+SignatureHeader, http.StatusUnauthorized)
		return
	}
	if req.ContentLength > MaxWebhookBody {
		refuseUnread(w)
		http.Error(w, "body too large", http.StatusRequestEntityTooLarge)
		return
	}
	select {
	case h.slots <- struct{}{}:
		defer func() { <-h.slots }()
	default:
		refuseUnread(w)
		w.Header().Set("Retry-After", "10")
		http.Error(w, "too many webhook deliveries at once; retry later", http.StatusServiceUnavailable)
		return
	}
	// A deadline for the whole body: the server's own timeouts restart per
	// read, and a trickled body must not hold a slot.
	_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(WebhookReadTimeout))
	secret, err := h.secret(req.Context())
	if err != nil {
		h.log.Error("github webhook: cannot resolve the webhook secret", "ref", h.ref, "err", err)
		http.Error(w, "webhook secret unavailable", http.StatusServiceUnavailable)
		return
	}
	mac := hmac.New(sha256.New, secret)
	buf := make([]byte, 32<<10)
	if _, err := io.CopyBuffer(mac, http.MaxBytesReader(w, req.Body, MaxWebhookBody), buf); err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			http.Error(w, "body too large", http.StatusRequestEntityTooLarge)
			return
		}
		if ne, ok := errors.AsType[net.Error](err); ok && ne.Timeout() {
			http.Error(w, "body too slow", http.StatusRequestTimeout)
			return
		}
		http.Error(w, "cannot read body", http.StatusBadRequest)
		return
	}
	if !macMatches(mac.Sum(nil), sig) {
		h.log.Warn("github webhook refused: bad signature", "delivery", delivery)
		http.Error(w, "bad signature", http.StatusUnauthorized)
		return
	}
	if delivery != "" && !h.remember(delivery) {
		h.log.Info("github webhook: replayed delivery dropped", "delivery", delivery)
		w.WriteHeader(http.StatusOK)
		return
	}
	h.wake()
	w.WriteHeader(http.StatusNoContent)
}

// refuseUnread ends a delivery answered without reading its body: the
// connection closes after the answer, and the rest of the body is not
// waited for (net/http would otherwise read a small remainder, up to
// 256 KiB, for as long as the server's read timeout allows, so a refused
// body sent a byte at a time would hold its connection for that long).
func refuseUnread(w http.ResponseWriter) {
	w.Header().Set("Connection", "close")
	_ = http.NewResponseController(w).SetReadDeadline(time.Now())
}

// remember records id among the recent deliveries; false when it was there.
func (h *webhook) remember(id string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.seen[id]; ok {
		return false
	}
	if len(h.order) < recentDeliveries {
		h.order = append(h.order, id)
	} else {
		delete(h.seen, h.order[h.next])
		h.order[h.next] = id
		h.next = (h.next + 1) % recentDeliveries
	}
	h.seen[id] = struct{}{}
	return true
}

func (h *webhook) secret(ctx context.Context) ([]byte, error) {
	secret, err := h.r.Resolve(ctx, h.ref)
	if err != nil {
		return nil, err
	}
	secret = strings.TrimSpace(secret)
	if secret == "" {
		return nil, errors.New("the webhook secret is empty")
	}
	return []byte(secret), nil
}

// macMatches compares a computed HMAC with an X-Hub-Signature-256 value, in
// constant time.
func macMatches(sum []byte, header string) bool {
	hexSig, ok := strings.CutPrefix(header, "sha256=")
	if !ok {
		return false
	}
	got, err := hex.DecodeString(hexSig)
	if err != nil {
		return false
	}
	return hmac.Equal(sum, got)
}

// VerifySignature checks an X-Hub-Signature-256 value against body, in
// constant time.
func VerifySignature(secret, body []byte, header string) bool {
	mac := hmac.New(sha256.New, secret)
	mac.Write(body)
	return macMatches(mac.Sum(nil), header)
}

// Sign returns the X-Hub-Signature-256 value for body, as GitHub computes it.
func Sign(secret, body []byte) string {
	mac := hmac.New(sha256.New, secret)
	mac.Write(body)
	return "sha256=" + hex.EncodeToString(mac.Sum(nil))
}
