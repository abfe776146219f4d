package gitsync

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/config"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/transport"
	"github.com/go-git/go-git/v5/plumbing/transport/client"
)

// The agent writes to its remote only on branches of its own: a drift
// proposal's branch. It never writes Branch, whatever it is asked.

// AgentBranchPrefix is the only prefix of branches the agent pushes.
const AgentBranchPrefix = "fleet-agent/"

func (r *Repo) pushable(branch string) error {
	if branch == r.cfg.Branch || !strings.HasPrefix(branch, AgentBranchPrefix) || strings.Contains(branch, "..") || strings.ContainsAny(branch, " ~^:?*[\\") {
		return fail(&Error{Kind: KindConfig, Message: fmt.Sprintf("the agent pushes only branches under %s, never %s (git.branch); %q is refused", AgentBranchPrefix, r.cfg.Branch, branch)})
	}
	return nil
}

// CommitFile writes, into the local copy, a commit whose parent is parent
// and whose tree is parent's with the file at path holding content. The file
// must exist at parent (a drift proposal rewrites it, never adds it). It
// returns the new commit's hash; nothing leaves the machine.
func (r *Repo) CommitFile(parent, path string, content []byte, message string, who Person, when time.Time) (string, error) {
	p, ok := cleanPath(path)
	if !ok {
		return "", fail(&Error{Kind: KindConfig, Path: path, Message: "git.path must be a relative path inside the repository, not " + quote(path)})
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	c, err := r.commit(parent)
	if err != nil {
		return "", err
	}
	tree, err := c.Tree()
	if err != nil {
		return "", localError("read the tree of "+parent, err)
	}
	blob := r.storage.NewEncodedObject()
	blob.SetType(plumbing.BlobObject)
	w, err := blob.Writer()
	if err != nil {
		return "", localError("write a blob", err)
	}
	if _, err := w.Write(content); err != nil {
		return "", localError("write a blob", err)
	}
	_ = w.Close()
	bh, err := r.storage.SetEncodedObject(blob)
	if err != nil {
		return "", localError("write a blob", err)
	}
	th, err := r.replaceInTree(tree, strings.Split(p, "/"), bh)
	if err != nil {
		if errors.Is(err, object.ErrEntryNotFound) {
			return "", fail(&Error{Kind: KindFileMissing, Commit: parent, Path: p, Message: fmt.Sprintf("commit %s has no file %s to rewrite", parent, p)})
		}
		return "", err
	}
	sig := object.Signature{Name: who.Name, Email: who.Email, When: when}
	nc := &object.Commit{Author: sig, Committer: sig, Message: message, TreeHash: th, ParentHashes: []plumbing.Hash{c.Hash}}
	obj := r.storage.NewEncodedObject()
	if err := nc.Encode(obj); err != nil {
		return "", localError("encode a commit", err)
	}
	ch, err := r.storage.SetEncodedObject(obj)
	if err != nil {
		return "", localError("write a commit", err)
	}
	return ch.String(), nil
}

// replaceInTree writes the trees on the way to a file whose blob changes.
func (r *Repo) replaceInTree(t *object.Tree, parts []string, blob plumbing.Hash) (plumbing.Hash, error) {
	entries := append([]object.TreeEntry(nil), t.Entries...)
	i := -1
	for k, e := range entries {
		if e.Name == parts[0] {
			i = k
		}
	}
	if i < 0 {
		return plumbing.ZeroHash, object.ErrEntryNotFound
	}
	if len(parts) == 1 {
		if !entries[i].Mode.IsFile() {
			return plumbing.ZeroHash, object.ErrEntryNotFound
		}
		entries[i].Hash = blob
	} else {
		sub, err := r.repo.TreeObject(entries[i].Hash)
		if err != nil {
			return plumbing.ZeroHash, object.ErrEntryNotFound
		}
		h, err := r.replaceInTree(sub, parts[1:], blob)
		if err != nil {
			return plumbing.ZeroHash, err
		}
		entries[i].Hash = h
	}
	nt := &object.Tree{Entries: entries}
	obj := r.storage.NewEncodedObject()
	if err := nt.Encode(obj); err != nil {
		return plumbing.ZeroHash, localError("encode a tree", err)
	}
	h, err := r.storage.SetEncodedObject(obj)
	if err != nil {
		return plumbing.ZeroHash, localError("write a tree", err)
	}
	return h, nil
}

// PushBranch makes the remote's branch point at commit (forced: the
// branch is the agent's own and is rewritten as its drift changes). An
// empty commit deletes the branch.
func (r *Repo) PushBranch(ctx context.Context, branch, commit string) error {
	if err := r.pushable(branch); err != nil {
		return err
	}
	auth, err := r.authMethod(ctx)
	if err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	dst := plumbing.ReferenceName("refs/heads/" + branch)
	spec := config.RefSpec(":" + dst.String())
	if commit != "" {
		h, err := r.commitHash(commit)
		if err != nil {
			return err
		}
		// go-git pushes refs, not hashes: a local ref outside what polls
		// mirror names the commit for the length of the push.
		local := plumbing.ReferenceName("refs/gitsync/push/" + branch)
		if err := r.storage.SetReference(plumbing.NewHashReference(local, h)); err != nil {
			return localError("name the commit to push", err)
		}
		defer func() { _ = r.storage.RemoveReference(local) }()
		spec = config.RefSpec("+" + local.String() + ":" + dst.String())
	}
	pctx, cancel := context.WithTimeout(ctx, r.cfg.FetchTimeout)
	defer cancel()
	err = runNet(pctx, func() error {
		return r.repo.PushContext(pctx, &git.PushOptions{RemoteName: remoteName, RefSpecs: []config.RefSpec{spec}, Auth: auth, Force: true})
	})
	if err == nil || errors.Is(err, git.NoErrAlreadyUpToDate) {
		return nil
	}
	if commit == "" && strings.Contains(err.Error(), "remote ref does not exist") {
		return nil // already gone
	}
	return pushError(pctx, "push "+branch+" to "+r.cfg.URL, err)
}

// CanPush asks the remote whether the credential may push (the receive-pack
// advertisement, which a forge refuses to a read-only credential); it
// writes nothing.
func (r *Repo) CanPush(ctx context.Context) error {
	auth, err := r.authMethod(ctx)
	if err != nil {
		return err
	}
	ep, err := transport.NewEndpoint(r.remote.url)
	if err != nil {
		return fail(&Error{Kind: KindConfig, Message: "git.url is not a git URL", Err: err})
	}
	cl, err := client.NewClient(ep)
	if err != nil {
		return fail(&Error{Kind: KindConfig, Message: "git.url: no git transport for it", Err: err})
	}
	lctx, cancel := context.WithTimeout(ctx, r.cfg.ListTimeout)
	defer cancel()
	return runNet(lctx, func() error {
		s, err := cl.NewReceivePackSession(ep, auth)
		if err != nil {
			return pushError(lctx, "ask "+r.cfg.URL+" whether the agent may push", err)
		}
		defer s.Close()
		if _, err := s.AdvertisedReferencesContext(lctx); err != nil && !errors.Is(err, transport.ErrEmptyRemoteRepository) {
			return pushError(lctx, "ask "+r.cfg.URL+" whether the agent may push", err)
		}
		return nil
	})
}

// pushError is remoteError with the advice a push needs: a credential that
// reads may still not write.
func pushError(ctx context.Context, op string, err error) error {
	if errors.Is(err, transport.ErrAuthenticationRequired) || errors.Is(err, transport.ErrAuthorizationFailed) || strings.Contains(err.Error(), "403") {
		return fail(&Error{Kind: KindAuth, Message: op + ": the remote refused to let the credential push; drift.pullRequests needs write access to the repository's contents (a token with contents: write, see docs/github.md), or turn drift.pullRequests off", Err: err})
	}
	return remoteError(ctx, op, err)
}
