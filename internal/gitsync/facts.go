package gitsync

import (
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
)

// Person is an author or committer.
type Person struct {
	Name, Email string
	When        time.Time
}

// CommitInfo is what the caller may want to show or check of a commit.
type CommitInfo struct {
	Hash      string
	Author    Person
	Committer Person
	Message   string
	Parents   []string
	// Tree is the hash of the commit's tree: two commits with the same
	// tree hold the same files.
	Tree string
	// Signed says whether the commit carries a signature (of any kind); use
	// Verify to know whether it is trusted.
	Signed bool
}

func isHex(s string) bool {
	for _, c := range s {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

func (r *Repo) commitHash(commit string) (plumbing.Hash, error) {
	if len(commit) != 40 || !isHex(commit) {
		return plumbing.ZeroHash, fail(&Error{Kind: KindUnknownCommit, Commit: commit, Message: "commit " + quote(commit) + " is not a full lowercase hex hash; use Resolve for a prefix"})
	}
	return plumbing.NewHash(commit), nil
}

func unknownCommit(commit string, err error) error {
	return fail(&Error{Kind: KindUnknownCommit, Commit: commit, Message: "commit " + commit + " is not in the local copy of the repository: it is on no fetched ref (or not a commit); poll first, or check the hash", Err: err})
}

// commit loads a commit; the caller holds r.mu.
func (r *Repo) commit(commit string) (*object.Commit, error) {
	h, err := r.commitHash(commit)
	if err != nil {
		return nil, err
	}
	c, err := r.repo.CommitObject(h)
	if err != nil {
		return nil, unknownCommit(commit, err)
	}
	return c, nil
}

// Resolve turns a hash prefix of at least 7 hex digits (what a person
// types after --commit) into the full hash of a commit in the local copy.
func (r *Repo) Resolve(prefix string) (string, error) {
	prefix = strings.ToLower(prefix)
	if len(prefix) < 7 || len(prefix) > 40 || !isHex(prefix) {
		return "", fail(&Error{Kind: KindUnknownCommit, Commit: prefix, Message: "a commit must be given by at least 7 hex digits of its hash"})
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	h, err := r.repo.ResolveRevision(plumbing.Revision(prefix))
	if err != nil {
		return "", unknownCommit(prefix, err)
	}
	if _, err := r.repo.CommitObject(*h); err != nil {
		return "", unknownCommit(prefix, err)
	}
	return h.String(), nil
}

// ReadFile returns the bytes of the file at path in commit. A missing file,
// a directory, a symlink or a submodule at path, and a file over
// MaxFileBytes, are refused with an error naming the commit.
func (r *Repo) ReadFile(commit, path string) ([]byte, error) {
	p, ok := cleanPath(path)
	if !ok {
		return nil, fail(&Error{Kind: KindConfig, Path: path, Message: "git.path must be a relative path inside the repository, not " + quote(path)})
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	c, err := r.commit(commit)
	if err != nil {
		return nil, err
	}
	tree, err := c.Tree()
	if err != nil {
		return nil, localError("read the tree of "+commit, err)
	}
	entry, err := tree.FindEntry(p)
	if errors.Is(err, object.ErrEntryNotFound) || errors.Is(err, object.ErrDirectoryNotFound) {
		return nil, fail(&Error{Kind: KindFileMissing, Commit: commit, Path: p, Message: fmt.Sprintf("commit %s has no file %s; add it, or fix git.path", commit, p)})
	}
	if err != nil {
		return nil, localError("find "+p+" in "+commit, err)
	}
	switch entry.Mode {
	case filemode.Regular, filemode.Executable, filemode.Deprecated:
	case filemode.Dir:
		return nil, notAFile(commit, p, "a directory")
	case filemode.Symlink:
		return nil, notAFile(commit, p, "a symbolic link (links are not followed)")
	case filemode.Submodule:
		return nil, notAFile(commit, p, "a submodule")
	default:
		return nil, notAFile(commit, p, "not a regular file")
	}
	blob, err := r.repo.BlobObject(entry.Hash)
	if err != nil {
		return nil, localError("read "+p+" in "+commit, err)
	}
	limit := r.cfg.MaxFileBytes
	if blob.Size > limit {
		return nil, fail(&Error{Kind: KindFileTooLarge, Commit: commit, Path: p, Message: fmt.Sprintf("%s in commit %s is %d bytes, over the limit of %d; make it smaller", p, commit, blob.Size, limit)})
	}
	rd, err := blob.Reader()
	if err != nil {
		return nil, localError("read "+p+" in "+commit, err)
	}
	defer rd.Close()
	data, err := io.ReadAll(io.LimitReader(rd, limit+1))
	if err != nil {
		return nil, localError("read "+p+" in "+commit, err)
	}
	if int64(len(data)) > limit {
		return nil, fail(&Error{Kind: KindFileTooLarge, Commit: commit, Path: p, Message: fmt.Sprintf("%s in commit %s is over the limit of %d bytes; make it smaller", p, commit, limit)})
	}
	return data, nil
}

func notAFile(commit, path, what string) error {
	return fail(&Error{Kind: KindNotAFile, Commit: commit, Path: path, Message: fmt.Sprintf("%s in commit %s is %s; git.path must name a regular file", path, commit, what)})
}

// Commit returns the author, committer, message and parents of a commit.
func (r *Repo) Commit(commit string) (CommitInfo, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c, err := r.commit(commit)
	if err != nil {
		return CommitInfo{}, err
	}
	info := CommitInfo{
		Hash:      c.Hash.String(),
		Author:    Person{Name: c.Author.Name, Email: c.Author.Email, When: c.Author.When},
		Committer: Person{Name: c.Committer.Name, Email: c.Committer.Email, When: c.Committer.When},
		Message:   c.Message,
		Signed:    c.PGPSignature != "",
		Tree:      c.TreeHash.String(),
	}
	for _, p := range c.ParentHashes {
		info.Parents = append(info.Parents, p.String())
	}
	return info, nil
}

// Descends reports whether commit a descends from commit b (a commit
// descends from itself). Both must be in the local copy.
func (r *Repo) Descends(a, b string) (bool, error) {
	if a == b {
		if _, err := r.Commit(a); err != nil {
			return false, err
		}
		return true, nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	ca, err := r.commit(a)
	if err != nil {
		return false, err
	}
	cb, err := r.commit(b)
	if err != nil {
		return false, err
	}
	ok, err := cb.IsAncestor(ca)
	if err != nil {
		return false, localError("walk the history of "+a, err)
	}
	return ok, nil
}

// CheckForward returns nil when to is from or descends from it, and
// ErrRewind otherwise: the branch was force-pushed (or from is not on it).
// A from that is no longer in the local copy counts as a rewind, since the
// copy keeps all history of the branch it follows.
func (r *Repo) CheckForward(from, to string) error {
	if _, err := r.Commit(to); err != nil {
		return err
	}
	ok, err := r.Descends(to, from)
	if KindOf(err) == KindUnknownCommit {
		return fail(&Error{Kind: KindRewind, Commit: to, Message: fmt.Sprintf("commit %s is not in the history of %s (it was rewritten away); a force-push is never applied: restore the history, or apply %s by hand with plan --commit and apply --commit", from, to, to), Err: err})
	}
	if err != nil {
		return err
	}
	if !ok {
		return fail(&Error{Kind: KindRewind, Commit: to, Message: fmt.Sprintf("commit %s does not descend from %s: %s was force-pushed or rewound; it is never applied: restore the history, or apply %s by hand with plan --commit and apply --commit", to, from, r.cfg.Branch, to)})
	}
	return nil
}

// MergeBase returns the best common ancestor of a and b (a pull request
// head and the tip of Branch). With several (criss-cross merges), the one
// committed last wins, then the smallest hash, so the answer is stable.
// It returns "" when the two share no history.
func (r *Repo) MergeBase(a, b string) (string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	ca, err := r.commit(a)
	if err != nil {
		return "", err
	}
	cb, err := r.commit(b)
	if err != nil {
		return "", err
	}
	bases, err := ca.MergeBase(cb)
	if err != nil {
		return "", localError("find the merge base of "+a+" and "+b, err)
	}
	if len(bases) == 0 {
		return "", nil
	}
	sort.Slice(bases, func(i, j int) bool {
		ti, tj := bases[i].Committer.When, bases[j].Committer.When
		if !ti.Equal(tj) {
			return ti.After(tj)
		}
		return bases[i].Hash.String() < bases[j].Hash.String()
	})
	return bases[0].Hash.String(), nil
}
