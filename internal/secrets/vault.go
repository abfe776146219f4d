package secrets

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/fleet-agent/fleet-agent/internal/refusal"
)

// fromVault reads one field of a HashiCorp Vault KV version 2 secret:
// vault://MOUNT/REST#FIELD is GET {addr}/v1/MOUNT/data/REST, the latest
// version. Each call asks Vault again; nothing is cached.
func (r *Resolver) fromVault(ctx context.Context, ref Ref) (string, error) {
	segs := strings.Split(ref.Name, "/")
	for _, s := range segs {
		if s == "" || s == "." || s == ".." {
			return "", fail(refusal.InvalidInput, ErrMalformed, ref, "PATH must be MOUNT/SECRET with no empty, . or .. segments")
		}
	}
	if len(segs) < 2 {
		return "", fail(refusal.InvalidInput, ErrMalformed, ref, "PATH must be MOUNT/SECRET (the first segment is the KV v2 mount), for example vault://secret/fleet/aws#token")
	}
	mount, rest := segs[0], segs[1:]

	addr := r.vault.Addr
	if addr == "" {
		addr, _ = r.env("VAULT_ADDR")
	}
	if addr == "" {
		return "", fail(refusal.InvalidState, ErrNotConfigured, ref, "no Vault address: set VAULT_ADDR in the agent's environment")
	}
	base, err := url.Parse(addr)
	if err != nil || (base.Scheme != "http" && base.Scheme != "https") || base.Host == "" || base.User != nil {
		return "", fail(refusal.InvalidState, ErrNotConfigured, ref, "VAULT_ADDR must be an http or https URL without credentials, like https://vault.example:8200")
	}
	token := r.vault.Token
	if token == "" {
		token, _ = r.env("VAULT_TOKEN")
	}
	if token == "" {
		return "", fail(refusal.InvalidState, ErrNotConfigured, ref, "no Vault token: set VAULT_TOKEN in the agent's environment")
	}
	// The token is a secret like any other: a proxy's error page or a
	// debug log must not print it either.
	r.redactor.Add(token)
	ns := r.vault.Namespace
	if ns == "" {
		ns, _ = r.env("VAULT_NAMESPACE")
	}

	target := base.JoinPath(append([]string{"v1", mount, "data"}, rest...)...)
	target.RawQuery, target.Fragment = "", ""
	where := base.Redacted()

	ctx, cancel := context.WithTimeout(ctx, r.vault.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target.String(), nil)
	if err != nil {
		return "", &refusal.Error{Code: refusal.Internal, Message: ref.String() + ": cannot build the Vault request: " + err.Error(), Err: err}
	}
	req.Header.Set("X-Vault-Token", token)
	// Vault Agent and proxies refuse requests without it (SSRF guard).
	req.Header.Set("X-Vault-Request", "true")
	if ns != "" {
		req.Header.Set("X-Vault-Namespace", ns)
	}
	resp, err := r.client.Do(req)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) && ctx.Err() != nil {
			return "", &refusal.Error{Code: refusal.Unavailable, Message: fmt.Sprintf("%s: Vault at %s did not answer within %s; check that it is up and reachable", ref, where, r.vault.Timeout), Err: errors.Join(ErrUnavailable, err)}
		}
		return "", &refusal.Error{Code: refusal.Unavailable, Message: fmt.Sprintf("%s: cannot reach Vault at %s: %s", ref, where, r.redactor.Redact(err.Error())), Err: errors.Join(ErrUnavailable, err)}
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxSecretSize+1))
	if err != nil {
		return "", &refusal.Error{Code: refusal.Unavailable, Message: fmt.Sprintf("%s: reading Vault's answer failed: %s", ref, r.redactor.Redact(err.Error())), Err: errors.Join(ErrUnavailable, err)}
	}
	if len(body) > maxSecretSize {
		return "", fail(refusal.InvalidState, ErrUnusable, ref, "Vault's answer is larger than %d bytes", maxSecretSize)
	}

	kvPath := mount + "/data/" + strings.Join(rest, "/")
	switch code := resp.StatusCode; {
	case code == http.StatusOK:
		return r.field(ref, body, kvPath)
	case code == http.StatusForbidden:
		return "", fail(refusal.InvalidState, ErrPermission, ref, "Vault at %s refused the token (403%s); give its policy read on %s, or renew it", where, r.vaultErrors(body), kvPath)
	case code == http.StatusNotFound:
		if deleted(body) {
			return "", fail(refusal.InvalidState, ErrNotFound, ref, "the latest version of %s is deleted in Vault; undelete it or write a new version", kvPath)
		}
		return "", fail(refusal.InvalidState, ErrNotFound, ref, "Vault at %s has no secret %s (404%s); check the path, and that %s is a KV version 2 mount", where, kvPath, r.vaultErrors(body), mount)
	case code == http.StatusTooManyRequests || code >= 500:
		return "", fail(refusal.Unavailable, ErrUnavailable, ref, "Vault at %s answered %d%s; it may be sealed, in standby or overloaded: try again later", where, code, r.vaultErrors(body))
	case code >= 300 && code < 400:
		return "", fail(refusal.InvalidState, ErrNotConfigured, ref, "Vault at %s answered with a redirect (%d); set VAULT_ADDR to the active node", where, code)
	default:
		return "", fail(refusal.InvalidState, ErrPermission, ref, "Vault at %s answered %d%s for %s", where, code, r.vaultErrors(body), kvPath)
	}
}

// kvResponse is the part of a KV v2 read the agent looks at.
type kvResponse struct {
	Data *struct {
		Data     map[string]json.RawMessage `json:"data"`
		Metadata struct {
			DeletionTime string `json:"deletion_time"`
			Destroyed    bool   `json:"destroyed"`
		} `json:"metadata"`
	} `json:"data"`
}

func (r *Resolver) field(ref Ref, body []byte, kvPath string) (string, error) {
	var kv kvResponse
	// The decoder's error text can quote bytes of the body, which holds
	// values: it is not passed on.
	if err := json.Unmarshal(body, &kv); err != nil || kv.Data == nil {
		return "", fail(refusal.InvalidState, ErrUnusable, ref, "Vault's answer for %s is not a KV version 2 read; is the mount KV version 2?", kvPath)
	}
	if kv.Data.Data == nil {
		return "", fail(refusal.InvalidState, ErrNotFound, ref, "the latest version of %s is deleted in Vault; undelete it or write a new version", kvPath)
	}
	raw, ok := kv.Data.Data[ref.Field]
	if !ok {
		names := make([]string, 0, len(kv.Data.Data))
		for k := range kv.Data.Data {
			names = append(names, k)
		}
		slices.Sort(names)
		return "", fail(refusal.InvalidState, ErrNotFound, ref, "%s has no field %s (fields: %s)", kvPath, ref.Field, strings.Join(names, ", "))
	}
	var v string
	if err := json.Unmarshal(raw, &v); err != nil {
		return "", fail(refusal.InvalidState, ErrUnusable, ref, "field %s of %s is not a string; store the secret as a string", ref.Field, kvPath)
	}
	return v, nil
}

// deleted reports whether a 404 body is Vault's answer for a soft-deleted or
// destroyed latest version, which carries metadata unlike a missing path.
func deleted(body []byte) bool {
	var kv kvResponse
	if json.Unmarshal(body, &kv) != nil || kv.Data == nil {
		return false
	}
	return kv.Data.Metadata.DeletionTime != "" || kv.Data.Metadata.Destroyed
}

// vaultErrors renders Vault's {"errors":[...]} for a message: ": a; b",
// short, and redacted, since it is text from another program.
func (r *Resolver) vaultErrors(body []byte) string {
	var e struct {
		Errors []string `json:"errors"`
	}
	if json.Unmarshal(body, &e) != nil || len(e.Errors) == 0 {
		return ""
	}
	var b bytes.Buffer
	for i, s := range e.Errors {
		if i == 3 {
			b.WriteString("; …")
			break
		}
		if i > 0 {
			b.WriteString("; ")
		}
		s = strings.Join(strings.Fields(s), " ")
		if len(s) > 200 {
			s = strings.ToValidUTF8(s[:200], "") + "…"
		}
		b.WriteString(s)
	}
	return ": " + r.redactor.Redact(b.String())
}
