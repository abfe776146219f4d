package gitsync

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"net"
	"net/url"
	"strings"
	"syscall"

	"github.com/fleet-agent/fleet-agent/internal/refusal"
	"github.com/go-git/go-git/v5/plumbing/transport"
	knownhosts "golang.org/x/crypto/ssh/knownhosts"
)

// Kind says what went wrong, in terms of what to do about it.
type Kind string

// The kinds of error gitsync returns. Each maps onto a refusal code (see
// Kind.Code); errors.Is(err, ErrX) tests for a kind.
const (
	// KindConfig: the git settings cannot work (bad URL, ssh without
	// knownHosts, unreadable keyring). INVALID_INPUT.
	KindConfig Kind = "config"
	// KindSecret: a secret reference could not be resolved. INVALID_STATE,
	// as the documented surface says for "a call that cannot be made (secret missing)".
	KindSecret Kind = "secret"
	// KindAuth: the remote refused the credentials. INVALID_STATE: waiting
	// does not fix a revoked token, a person must; polling still backs off
	// and retries, so a rotated secret is picked up without a restart.
	KindAuth Kind = "auth"
	// KindPermission: this user may not read a repository on this machine
	// (a path or file:// URL): git refuses one owned by another user, or
	// the files are not readable. INVALID_STATE: run as the agent's user.
	KindPermission Kind = "permission"
	// KindHostKey: the ssh host key is unknown or does not match knownHosts.
	// INVALID_STATE: never trusted on first use.
	KindHostKey Kind = "host-key"
	// KindNotFound: the remote says there is no such repository (GitHub
	// also says so to a token that may not read it). INVALID_STATE.
	KindNotFound Kind = "not-found"
	// KindUnreachable: no answer, or a broken one. UNAVAILABLE.
	KindUnreachable Kind = "unreachable"
	// KindTimeout: the remote did not answer within the deadline.
	// UNAVAILABLE.
	KindTimeout Kind = "timeout"
	// KindBackoff: a poll was asked for while backing off after failures;
	// nothing was sent. UNAVAILABLE.
	KindBackoff Kind = "backoff"
	// KindBranchMissing: the remote has no such branch. INVALID_STATE.
	KindBranchMissing Kind = "branch-missing"
	// KindUnknownCommit: the commit is not in the local copy (not fetched,
	// or not a commit). INVALID_STATE.
	KindUnknownCommit Kind = "unknown-commit"
	// KindRewind: a commit does not descend from the one it should (a
	// force-push). INVALID_STATE; never applied.
	KindRewind Kind = "rewind"
	// KindFileMissing: no file at the path in that commit. INVALID_INPUT.
	KindFileMissing Kind = "file-missing"
	// KindNotAFile: a directory, symlink or submodule at the path.
	// INVALID_INPUT.
	KindNotAFile Kind = "not-a-file"
	// KindFileTooLarge: the file is over the size limit. INVALID_INPUT.
	KindFileTooLarge Kind = "file-too-large"
	// KindUnsigned: verification is on and the commit carries no
	// signature. INVALID_STATE.
	KindUnsigned Kind = "unsigned"
	// KindUnknownKey: the signature is by a key not in the keyring (or of
	// a kind the keyring cannot hold, such as ssh or x509). INVALID_STATE.
	KindUnknownKey Kind = "unknown-key"
	// KindBadSignature: the signature does not verify with the key that
	// made it: the commit was altered, or the signature is malformed.
	// INVALID_STATE.
	KindBadSignature Kind = "bad-signature"
	// KindLocal: the local copy could not be read or written. INTERNAL.
	KindLocal Kind = "local"
)

// Code is the refusal code a kind maps onto.
func (k Kind) Code() refusal.Code {
	switch k {
	case KindConfig, KindFileMissing, KindNotAFile, KindFileTooLarge:
		return refusal.InvalidInput
	case KindUnreachable, KindTimeout, KindBackoff:
		return refusal.Unavailable
	case KindLocal:
		return refusal.Internal
	}
	return refusal.InvalidState
}

// Error is what gitsync returns. It is always wrapped in a
// *refusal.Error carrying the kind's code, so refusal.CodeOf works on it;
// errors.As(err, &*gitsync.Error) gives the details.
type Error struct {
	Kind Kind
	// Message says what happened and what to do.
	Message string
	// Commit, Ref and Path name what the error is about, when it is about
	// one of them.
	Commit, Ref, Path string
	// Err is the cause from a library, when there is one.
	Err error
}

func (e *Error) Error() string {
	if e.Err != nil {
		return e.Message + ": " + e.Err.Error()
	}
	return e.Message
}

// Unwrap exposes the cause.
func (e *Error) Unwrap() error { return e.Err }

// Is matches the sentinel of the same kind.
func (e *Error) Is(target error) bool {
	s, ok := target.(sentinel)
	return ok && Kind(s) == e.Kind
}

type sentinel Kind

func (s sentinel) Error() string { return "gitsync: " + string(s) }

// Sentinels for errors.Is.
var (
	ErrConfig        error = sentinel(KindConfig)
	ErrSecret        error = sentinel(KindSecret)
	ErrAuth          error = sentinel(KindAuth)
	ErrHostKey       error = sentinel(KindHostKey)
	ErrNotFound      error = sentinel(KindNotFound)
	ErrUnreachable   error = sentinel(KindUnreachable)
	ErrTimeout       error = sentinel(KindTimeout)
	ErrBackoff       error = sentinel(KindBackoff)
	ErrBranchMissing error = sentinel(KindBranchMissing)
	ErrUnknownCommit error = sentinel(KindUnknownCommit)
	ErrRewind        error = sentinel(KindRewind)
	ErrFileMissing   error = sentinel(KindFileMissing)
	ErrNotAFile      error = sentinel(KindNotAFile)
	ErrFileTooLarge  error = sentinel(KindFileTooLarge)
	ErrUnsigned      error = sentinel(KindUnsigned)
	ErrUnknownKey    error = sentinel(KindUnknownKey)
	ErrBadSignature  error = sentinel(KindBadSignature)
	ErrLocal         error = sentinel(KindLocal)
)

// fail builds the refusal for e.
func fail(e *Error) error {
	return &refusal.Error{Code: e.Kind.Code(), Message: e.Error(), Err: e}
}

// KindOf returns the kind of a gitsync error, or "" when err is not one.
func KindOf(err error) Kind {
	var e *Error
	if errors.As(err, &e) {
		return e.Kind
	}
	return ""
}

// remoteError classifies an error from talking to the remote. op says what
// was being done ("list refs of URL").
func remoteError(ctx context.Context, op string, err error) error {
	var kh *knownhosts.KeyError
	var netErr net.Error
	var urlErr *url.Error
	switch {
	case errors.Is(err, transport.ErrAuthenticationRequired), errors.Is(err, transport.ErrAuthorizationFailed),
		strings.Contains(err.Error(), "unable to authenticate"):
		return fail(&Error{Kind: KindAuth, Message: op + ": the remote refused the credentials; check git.auth (token, username/password or sshKey) and its access to the repository", Err: err})
	case errors.As(err, &kh):
		if len(kh.Want) == 0 {
			return fail(&Error{Kind: KindHostKey, Message: op + ": the ssh host key is not in git.auth.knownHosts; add the host's key there (it is never trusted on first use)", Err: err})
		}
		return fail(&Error{Kind: KindHostKey, Message: op + ": the ssh host key does not match git.auth.knownHosts; the host changed keys or someone is in the way: check before updating knownHosts", Err: err})
	case errors.Is(err, fs.ErrPermission), strings.Contains(err.Error(), "dubious ownership"),
		strings.Contains(strings.ToLower(err.Error()), "permission denied"):
		return fail(&Error{Kind: KindPermission, Message: op + ": this user may not read the repository (git refuses one owned by another user, or its files are not readable); run as the agent's user (sudo -u fleet-agent ...), or give this user read access", Err: err})
	case errors.Is(err, transport.ErrRepositoryNotFound):
		return fail(&Error{Kind: KindNotFound, Message: op + ": the remote has no such repository, or the credentials may not read it; check git.url and the token's access", Err: err})
	case errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &netErr) && netErr.Timeout()):
		return fail(&Error{Kind: KindTimeout, Message: op + ": no answer within the deadline; the agent retries with backoff", Err: err})
	case ctx.Err() != nil && errors.Is(err, context.Canceled):
		return err
	case errors.Is(err, syscall.ECONNREFUSED), errors.As(err, &urlErr), errors.As(err, &netErr),
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return fail(&Error{Kind: KindUnreachable, Message: op + ": the remote cannot be reached; the agent retries with backoff", Err: err})
	}
	// Anything else from a remote (a 5xx, a broken advertisement) is a
	// failure of the remote, not of the agent: retry.
	return fail(&Error{Kind: KindUnreachable, Message: op + ": the remote failed; the agent retries with backoff", Err: err})
}

func localError(op string, err error) error {
	return fail(&Error{Kind: KindLocal, Message: op + ": the local copy of the repository failed; if it persists, stop the agent and delete the git directory in the state directory (it is fetched again)", Err: err})
}
