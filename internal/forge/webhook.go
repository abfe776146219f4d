package forge

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strings"
)

// MaxWebhookBody is the largest delivery read: GitHub caps payloads at 25 MiB.
const MaxWebhookBody = 25 << 20

// SignatureHeader carries HMAC-SHA256 of the raw body, "sha256=" and hex.
const SignatureHeader = "X-Hub-Signature-256"

// WebhookHandler serves POST /hooks/github: a delivery whose signature checks
// out calls wake, and that is all it does; the payload is not read for
// anything, since the agent learns what moved from git and the API. wake
// must not block (a non-blocking send on a buffered channel, say).
//
// Answers: 204 delivered, 401 signature bad or missing, 405 not a POST, 413
// body over 25 MiB, 503 the secret does not resolve. The secret is resolved
// for each delivery.
func WebhookHandler(r Resolver, secretRef string, wake func(), log *slog.Logger) http.Handler {
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return &webhook{r: r, ref: secretRef, wake: wake, log: log}
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
	r    Resolver
	ref  string
	wake func()
	log  *slog.Logger
}

func (h *webhook) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if req.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		http.Error(w, "only POST", http.StatusMethodNotAllowed)
		return
	}
	sig := req.Header.Get(SignatureHeader)
	if sig == "" {
		h.log.Warn("github webhook refused: no signature", "delivery", req.Header.Get("X-GitHub-Delivery"))
		http.Error(w, "missing "+SignatureHeader, http.StatusUnauthorized)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, req.Body, MaxWebhookBody))
	if err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			http.Error(w, "body too large", http.StatusRequestEntityTooLarge)
			return
		}
		http.Error(w, "cannot read body", http.StatusBadRequest)
		return
	}
	ok, err := h.verify(req.Context(), body, sig)
	if err != nil {
		h.log.Error("github webhook: cannot resolve the webhook secret", "ref", h.ref, "err", err)
		http.Error(w, "webhook secret unavailable", http.StatusServiceUnavailable)
		return
	}
	if !ok {
		h.log.Warn("github webhook refused: bad signature", "delivery", req.Header.Get("X-GitHub-Delivery"))
		http.Error(w, "bad signature", http.StatusUnauthorized)
		return
	}
	h.wake()
	w.WriteHeader(http.StatusNoContent)
}

func (h *webhook) verify(ctx context.Context, body []byte, header string) (bool, error) {
	secret, err := h.r.Resolve(ctx, h.ref)
	if err != nil {
		return false, err
	}
	secret = strings.TrimSpace(secret)
	if secret == "" {
		return false, errors.New("the webhook secret is empty")
	}
	return VerifySignature([]byte(secret), body, header), nil
}

// VerifySignature checks an X-Hub-Signature-256 value against body, in
// constant time.
func VerifySignature(secret, body []byte, header string) bool {
	hexSig, ok := strings.CutPrefix(header, "sha256=")
	if !ok {
		return false
	}
	got, err := hex.DecodeString(hexSig)
	if err != nil {
		return false
	}
	mac := hmac.New(sha256.New, secret)
	mac.Write(body)
	return hmac.Equal(mac.Sum(nil), got)
}

// Sign returns the X-Hub-Signature-256 value for body, as GitHub computes it.
func Sign(secret, body []byte) string {
	mac := hmac.New(sha256.New, secret)
	mac.Write(body)
	return "sha256=" + hex.EncodeToString(mac.Sum(nil))
}
