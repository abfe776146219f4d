// Package gitsync is the agent's eyes on the git repository: it keeps a
// local copy of the remote, says what moved since the last poll, and
// answers questions about commits (the document at a commit, ancestry,
// merge bases, authors, signatures). It knows nothing of GitHub or plans.
//
// # The local copy
//
// Open keeps a bare repository in the directory it is given (inside the
// state directory), in go-git's file storage with a small object cache, so
// memory stays flat and a restart fetches only what is new. It mirrors
// exactly the refs it follows under their remote names: Branch
// (refs/heads/main) and the refs the caller's Want selects (refs/pull/N/head
// on GitHub, refs/heads/* as proposals elsewhere), plus the caller's pins
// (refs/gitsync/pin/NAME, to keep an applied commit readable after a
// force-push). Refs that disappear remotely or that Want stops selecting are
// deleted at the next poll, with the directories they leave. Fetched objects
// arrive as pack files; once MaxPacks of them pile up, the copy is repacked
// into one pack of what the kept refs reach, which drops the objects of
// closed pull requests and rewritten history. So the copy's size follows
// the followed history, not the months it has run.
//
// # Polling
//
// Poll lists the remote's refs (the ref advertisement only). When neither
// Branch nor a wanted ref moved, that is all: no object is requested. When
// some moved, it fetches only those refs, with full history, sending what
// the copy has so that only new objects come. Full history rather than a
// shallow copy: ancestry checks and merge bases need it, and a shallow copy
// re-downloads the whole snapshot on every change (BenchmarkIncrementalFetch
// on 2,000 commits and a 5 MB tree: one new commit costs 1.6 KB and 98 ms
// full, 2.9 MB and 219 ms at depth 1). A ref that moves to a commit already in the copy is updated
// without any fetch.
//
// Every network call has a deadline (ListTimeout, FetchTimeout) and ends
// with its context. A failed poll keeps the copy and Last as they were and
// backs off (doubling from BackoffMin to BackoffMax on the injected clock).
//
// Remotes: https (token as HTTP basic password with user x-access-token or
// Username; or Username and Password), ssh (a private key and a known_hosts
// file: an unknown host key is refused, never trusted on first use), file://
// and local paths (go-git runs the local git-upload-pack for these, so the
// git CLI must be installed where such a remote is used). Secrets are
// references, resolved through Resolver at each use and never kept.
//
// # Errors
//
// Every error is a *refusal.Error wrapping an *Error whose Kind says what
// happened; errors.Is(err, ErrRewind) and the like test for a kind. Codes:
// unreachable, timeout and backoff are UNAVAILABLE (retry later); auth
// refused, repository not found, unknown ssh host, missing secret, missing
// branch, rewind and signature failures are INVALID_STATE (a person must act:
// the documented surface files "a call that cannot be made (secret missing,
// permission)" there, and polling still retries so a fix is picked up);
// missing, non-regular or oversize files are INVALID_INPUT, like the rest of
// a bad document; bad settings are INVALID_INPUT.
//
// # Signatures
//
// With a keyring (Config.Keyring or KeyringPath, armored OpenPGP keys
// concatenated), Verify trusts a commit only if one of the keys signed it,
// and tells unsigned, unknown key and bad signature apart. GitHub signs the
// merges it makes in its web interface with its own key, so a repository
// merged through GitHub needs that key trusted too. The operator appends it
// to the keyring:
//
//	curl -fsSL https://github.com/web-flow.gpg >> /etc/fleet-agent/trusted.asc
//
// The keyring file is read at each verification, so no restart is needed.
//
// # Waking up
//
// A Waiter paces the loop: the interval less up to 10% jitter (never more),
// Wake for webhooks, and for local remotes an fsnotify watch on the refs
// directory and packed-refs that wakes the loop as soon as a ref changes.
package gitsync
