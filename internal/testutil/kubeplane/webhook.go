package kubeplane

import (
	"crypto/tls"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// webhook is the TokenReview endpoint the apiserver's webhook token
// authenticator calls (--authentication-token-webhook-config-file). It only
// forwards: the test sets the real reviewer (a cloud emulator answering for
// the credentials it minted) whenever it likes, and one plane serves tests
// that each plug in their own.
type webhook struct {
	reviewer atomic.Pointer[http.Handler]
	reviews  atomic.Int64
	srv      *http.Server
	ln       net.Listener
}

func startWebhook(cert tls.Certificate) (*webhook, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	w := &webhook{ln: ln}
	w.srv = &http.Server{
		Handler:           http.HandlerFunc(w.serve),
		TLSConfig:         &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12},
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          nil,
	}
	go func() { _ = w.srv.ServeTLS(ln, "", "") }()
	return w, nil
}

func (w *webhook) url() string { return "https://" + w.ln.Addr().String() + "/tokenreview" }

func (w *webhook) close() { _ = w.srv.Close() }

func (w *webhook) serve(rw http.ResponseWriter, r *http.Request) {
	w.reviews.Add(1)
	if h := w.reviewer.Load(); h != nil {
		(*h).ServeHTTP(rw, r)
		return
	}
	// No reviewer: the token could not be checked. Said in status.error,
	// which reaches the apiserver's log and, being an error, is never cached.
	var review authnv1.TokenReview
	_ = json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&review)
	reply(rw, review.TypeMeta, authnv1.TokenReviewStatus{Error: "kubeplane: no TokenReview handler set (plane.SetTokenReviewer)"})
}

// ReviewerFunc is a TokenReview handler from a function: given the bearer
// token and the audiences the apiserver asks for, it says whether the token
// is good and, if so, whose it is and the audiences it is good for (nil:
// those asked). A refusal is answered as a cloud's authenticator does,
// authenticated false and no error (status.error means "could not check"):
// the apiserver caches such a refusal for Options.TokenCacheTTL, but never
// an error.
type ReviewerFunc func(token string, audiences []string) (user authnv1.UserInfo, auds []string, ok bool)

func (f ReviewerFunc) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	var review authnv1.TokenReview
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err == nil {
		err = json.Unmarshal(body, &review)
	}
	if err != nil || r.Method != http.MethodPost {
		http.Error(rw, "kubeplane: want a POSTed TokenReview", http.StatusBadRequest)
		return
	}
	user, auds, ok := f(review.Spec.Token, review.Spec.Audiences)
	if !ok {
		reply(rw, review.TypeMeta, authnv1.TokenReviewStatus{})
		return
	}
	if auds == nil {
		auds = review.Spec.Audiences
	}
	reply(rw, review.TypeMeta, authnv1.TokenReviewStatus{Authenticated: true, User: user, Audiences: auds})
}

func reply(rw http.ResponseWriter, tm metav1.TypeMeta, st authnv1.TokenReviewStatus) {
	if tm.APIVersion == "" {
		tm = metav1.TypeMeta{APIVersion: "authentication.k8s.io/v1", Kind: "TokenReview"}
	}
	rw.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(rw).Encode(&authnv1.TokenReview{TypeMeta: tm, Status: st})
}
