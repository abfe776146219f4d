package gitsync

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/config"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/cache"
	"github.com/go-git/go-git/v5/plumbing/transport"
	"github.com/go-git/go-git/v5/storage/filesystem"
	"github.com/go-git/go-git/v5/storage/memory"

	"github.com/go-git/go-billy/v5/osfs"

	"github.com/fleet-agent/fleet-agent/internal/backoff"
)

const remoteName = "origin"

// pinPrefix holds the refs the caller pins (Pin); they are never pruned and
// keep their commits through repacks.
const pinPrefix = "refs/gitsync/pin/"

// ChangeKind says how a ref changed between two polls.
type ChangeKind string

// The kinds of change.
const (
	Added   ChangeKind = "added"
	Moved   ChangeKind = "moved"
	Removed ChangeKind = "removed"
)

// Change is one ref that differs from the previous good poll.
type Change struct {
	Ref  string
	Kind ChangeKind
	// Old and New are commit hashes; Old is "" when added, New "" when
	// removed.
	Old, New string
	// FastForward is set on a move when New descends from Old; a move
	// without it is a force-push.
	FastForward bool
}

// Snapshot is the remote as the last good poll saw it, limited to Branch
// and the refs Want selects, all present in the local copy.
type Snapshot struct {
	// Branch is the full name of the followed branch (refs/heads/main).
	Branch string
	// Tip is the commit of Branch; "" before the first good poll.
	Tip string
	// Heads are the other selected refs and their commits.
	Heads map[string]string
	// Changes are the differences from the previous good poll, by ref
	// name; empty when nothing moved.
	Changes []Change
	// PolledAt is when the poll listed the refs (zero when loaded from the
	// local copy at Open).
	PolledAt time.Time
	// Fetched says whether objects were requested from the remote.
	Fetched bool
}

// Health says how polling goes, for readiness and metrics.
type Health struct {
	// LastSuccess is the time of the last good poll (zero if none yet).
	LastSuccess time.Time
	// Failures counts polls that failed since the last good one.
	Failures int
	// RetryAt is when the next poll may touch the remote; zero when not
	// backing off.
	RetryAt time.Time
	// LastError is the error of the last failed poll, nil after a good one.
	LastError error
}

// Repo is the local copy of one remote repository. Its methods are safe
// for concurrent use; polls run one at a time, and reads wait while a
// fetch writes.
type Repo struct {
	cfg    Config
	remote remote

	storage *filesystem.Storage
	repo    *git.Repository

	pollMu sync.Mutex // one poll at a time
	mu     sync.Mutex // guards the storage: go-git's file storage is not safe for concurrent use

	stateMu sync.Mutex
	want    func(string) bool
	last    Snapshot
	health  Health
}

// Open opens the local copy in cfg.Dir, creating it when missing, and
// loads the refs of the last good poll from it; it does not touch the
// network.
func Open(cfg Config) (*Repo, error) {
	rem, err := cfg.normalise()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
		return nil, localError("create "+cfg.Dir, err)
	}
	st, repo, err := openStorage(cfg)
	if err != nil {
		return nil, err
	}
	r := &Repo{cfg: cfg, remote: rem, storage: st, repo: repo, want: cfg.Want}
	if err := r.setRemote(); err != nil {
		_ = st.Close()
		return nil, err
	}
	snap, err := r.localSnapshot()
	if err != nil {
		_ = st.Close()
		return nil, err
	}
	r.last = snap
	return r, nil
}

// openStorage opens (or creates) the bare repository in cfg.Dir.
func openStorage(cfg Config) (*filesystem.Storage, *git.Repository, error) {
	removeTempPacks(cfg.Dir)
	fs := osfs.New(cfg.Dir)
	st := filesystem.NewStorageWithOptions(fs, cache.NewObjectLRU(cache.FileSize(cfg.CacheBytes)), filesystem.Options{
		// The agent is the only writer of its copy; go-git may then cache
		// what it read of packed refs and pack indexes.
		ExclusiveAccess: true,
		// Pack files stay open between reads, at most this many at once.
		MaxOpenDescriptors: 32,
		// Blobs over this size are streamed from the pack, not held whole
		// in memory (and not cached).
		LargeObjectThreshold: 1 << 20,
	})
	ps := &packStorage{Storage: st, dir: cfg.Dir}
	repo, err := git.Open(ps, nil)
	if errors.Is(err, git.ErrRepositoryNotExists) {
		repo, err = git.Init(ps, nil)
	}
	if err != nil {
		_ = st.Close()
		return nil, nil, localError("open the local copy in "+cfg.Dir, err)
	}
	return st, repo, nil
}

// setRemote records the URL in the local copy. A copy made from another
// URL keeps its objects (harmless, dropped at the next repack) but loses
// its refs, so that nothing of the old remote is reported as this one's.
func (r *Repo) setRemote() error {
	cfg, err := r.repo.Config()
	if err != nil {
		return localError("read the local copy's config", err)
	}
	if rc, ok := cfg.Remotes[remoteName]; ok && len(rc.URLs) == 1 && rc.URLs[0] == r.remote.url {
		return nil
	}
	if _, ok := cfg.Remotes[remoteName]; ok {
		refs, err := r.allRefs()
		if err != nil {
			return err
		}
		for name := range refs {
			if err := r.storage.RemoveReference(plumbing.ReferenceName(name)); err != nil {
				return localError("drop the refs of the previous remote", err)
			}
		}
	}
	cfg.Remotes[remoteName] = &config.RemoteConfig{Name: remoteName, URLs: []string{r.remote.url}}
	if err := r.repo.SetConfig(cfg); err != nil {
		return localError("write the local copy's config", err)
	}
	return nil
}

// Close releases the local copy's open files.
func (r *Repo) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.storage.Close()
}

// BranchRef is the full name of the followed branch.
func (r *Repo) BranchRef() string { return "refs/heads/" + r.cfg.Branch }

// SetWant changes which refs besides Branch are followed, from the next
// poll on; refs no longer wanted are dropped from the local copy then.
func (r *Repo) SetWant(want func(ref string) bool) {
	r.stateMu.Lock()
	defer r.stateMu.Unlock()
	r.want = want
}

// Last returns the snapshot of the last good poll (or, before one, of the
// local copy as Open found it). It stays readable while the remote fails.
func (r *Repo) Last() Snapshot {
	r.stateMu.Lock()
	defer r.stateMu.Unlock()
	return cloneSnapshot(r.last)
}

// Health reports how polling goes.
func (r *Repo) Health() Health {
	r.stateMu.Lock()
	defer r.stateMu.Unlock()
	return r.health
}

func cloneSnapshot(s Snapshot) Snapshot {
	c := s
	c.Heads = make(map[string]string, len(s.Heads))
	for k, v := range s.Heads {
		c.Heads[k] = v
	}
	c.Changes = append([]Change(nil), s.Changes...)
	return c
}

// retryAt is when the remote may be tried again; zero when not backing off.
func (r *Repo) retryAt() time.Time {
	r.stateMu.Lock()
	defer r.stateMu.Unlock()
	return r.health.RetryAt
}

// Poll lists the remote's refs and, when Branch or a wanted ref moved,
// fetches just those refs (full history, only the objects the local copy
// lacks). Refs that are gone or no longer wanted are dropped locally. When
// nothing moved, nothing but the ref advertisement is requested.
//
// A failure leaves the local copy and Last as they were and starts a
// backoff (doubling from BackoffMin to BackoffMax on the injected clock);
// during it Poll returns ErrBackoff without touching the network.
func (r *Repo) Poll(ctx context.Context) (Snapshot, error) {
	r.pollMu.Lock()
	defer r.pollMu.Unlock()

	now := r.cfg.Clock.Now()
	r.stateMu.Lock()
	h := r.health
	want := r.want
	r.stateMu.Unlock()
	if !h.RetryAt.IsZero() && now.Before(h.RetryAt) {
		return r.Last(), fail(&Error{Kind: KindBackoff, Message: fmt.Sprintf("not polling %s until %s after %d failed polls", r.cfg.URL, h.RetryAt.UTC().Format(time.RFC3339), h.Failures), Err: h.LastError})
	}
	snap, err := r.poll(ctx, want, now)
	if err != nil {
		if ctx.Err() != nil && errors.Is(err, context.Canceled) {
			// The caller gave up (shutdown): not a failure of the remote.
			return r.Last(), err
		}
		if KindOf(err) != KindBranchMissing {
			r.failed(now, err)
		}
		return r.Last(), err
	}
	r.stateMu.Lock()
	r.last = snap
	r.health = Health{LastSuccess: now}
	r.stateMu.Unlock()
	return cloneSnapshot(snap), nil
}

func (r *Repo) failed(now time.Time, err error) {
	r.stateMu.Lock()
	defer r.stateMu.Unlock()
	r.health.Failures++
	r.health.RetryAt = now.Add(backoff.Wait(r.health.Failures, r.cfg.BackoffMin, r.cfg.BackoffMax, nil))
	r.health.LastError = err
}

func (r *Repo) poll(ctx context.Context, want func(string) bool, now time.Time) (Snapshot, error) {
	auth, err := r.authMethod(ctx)
	if err != nil {
		return Snapshot{}, err
	}
	remoteRefs, err := r.list(ctx, auth)
	if err != nil {
		return Snapshot{}, err
	}
	branch := r.BranchRef()
	wanted := map[string]plumbing.Hash{}
	for _, ref := range remoteRefs {
		name := ref.Name().String()
		if ref.Type() != plumbing.HashReference || strings.HasPrefix(name, "refs/gitsync/") {
			continue
		}
		if name == branch || (want != nil && want(name) && isFollowable(name)) {
			wanted[name] = ref.Hash()
		}
	}
	if _, ok := wanted[branch]; !ok {
		return Snapshot{}, fail(&Error{Kind: KindBranchMissing, Ref: branch, Message: "the remote has no branch " + r.cfg.Branch + "; check git.branch (nothing is applied until it exists again; the last known tip is kept)"})
	}

	r.mu.Lock()
	local, err := r.allRefs()
	r.mu.Unlock()
	if err != nil {
		return Snapshot{}, err
	}
	var fetch []config.RefSpec
	var set, drop []*plumbing.Reference
	for name, h := range wanted {
		if old, ok := local[name]; ok && old == h {
			continue
		}
		ref := plumbing.NewHashReference(plumbing.ReferenceName(name), h)
		r.mu.Lock()
		_, err := r.repo.CommitObject(h)
		r.mu.Unlock()
		if err == nil {
			// Already here (a head on a commit of main, a branch put back):
			// the copy has full history, so the ref can be set without asking.
			set = append(set, ref)
			continue
		}
		fetch = append(fetch, config.RefSpec("+"+name+":"+name))
	}
	for name, h := range local {
		if strings.HasPrefix(name, "refs/gitsync/") {
			continue
		}
		if _, ok := wanted[name]; !ok {
			drop = append(drop, plumbing.NewHashReference(plumbing.ReferenceName(name), h))
		}
	}
	sort.Slice(fetch, func(i, j int) bool { return fetch[i] < fetch[j] })

	if len(fetch) > 0 {
		fctx, cancel := context.WithTimeout(ctx, r.cfg.FetchTimeout)
		defer cancel()
		err := runNet(fctx, func() error {
			r.mu.Lock()
			defer r.mu.Unlock()
			return r.repo.FetchContext(fctx, &git.FetchOptions{
				RemoteName: remoteName,
				RefSpecs:   fetch,
				Auth:       auth,
				Tags:       git.NoTags,
				Force:      true,
			})
		})
		if err != nil && !errors.Is(err, git.NoErrAlreadyUpToDate) {
			return Snapshot{}, remoteError(fctx, "fetch from "+r.cfg.URL, err)
		}
	}
	r.mu.Lock()
	err = r.updateRefs(set, drop)
	r.mu.Unlock()
	if err != nil {
		return Snapshot{}, err
	}
	snap, err := r.localSnapshot()
	if err != nil {
		return Snapshot{}, err
	}
	snap.PolledAt = now
	snap.Fetched = len(fetch) > 0
	r.stateMu.Lock()
	prev := r.last
	r.stateMu.Unlock()
	snap.Changes = r.changes(prev, snap)
	if len(fetch) > 0 || len(drop) > 0 {
		if err := r.maintain(); err != nil {
			return Snapshot{}, err
		}
	}
	return snap, nil
}

// isFollowable keeps refs that name commits we can use: tags and the
// remote's symbolic HEAD are not proposals.
func isFollowable(name string) bool {
	return strings.HasPrefix(name, "refs/") && !strings.HasPrefix(name, "refs/tags/")
}

// list asks for the remote's ref advertisement only.
func (r *Repo) list(ctx context.Context, auth transport.AuthMethod) ([]*plumbing.Reference, error) {
	lctx, cancel := context.WithTimeout(ctx, r.cfg.ListTimeout)
	defer cancel()
	rem := git.NewRemote(memory.NewStorage(), &config.RemoteConfig{Name: remoteName, URLs: []string{r.remote.url}})
	var refs []*plumbing.Reference
	err := runNet(lctx, func() error {
		var err error
		refs, err = rem.ListContext(lctx, &git.ListOptions{Auth: auth, PeelingOption: git.IgnorePeeled})
		return err
	})
	if errors.Is(err, transport.ErrEmptyRemoteRepository) || (err != nil && strings.Contains(err.Error(), "remote repository is empty")) {
		return nil, nil
	}
	if err != nil {
		return nil, remoteError(lctx, "list the refs of "+r.cfg.URL, err)
	}
	return refs, nil
}

// runNet runs a network call and returns when it ends or ctx does, so that
// every call has a deadline even where a transport ignores the context (the
// ssh handshake). An abandoned call ends on its own: go-git reads through
// the context, and a fetch keeps the storage lock until it is done.
func runNet(ctx context.Context, f func() error) error {
	done := make(chan error, 1)
	go func() { done <- f() }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (r *Repo) updateRefs(set, drop []*plumbing.Reference) error {
	for _, ref := range set {
		if err := r.storage.SetReference(ref); err != nil {
			return localError("update "+ref.Name().String(), err)
		}
	}
	for _, ref := range drop {
		if err := r.storage.RemoveReference(ref.Name()); err != nil {
			return localError("drop "+ref.Name().String(), err)
		}
		r.removeEmptyDirs(ref.Name().String())
	}
	return nil
}

// removeEmptyDirs removes the directories a dropped loose ref leaves
// behind (refs/pull/7/), so that months of pull requests leave no trace.
func (r *Repo) removeEmptyDirs(name string) {
	dir := filepath.Dir(filepath.Join(r.cfg.Dir, filepath.FromSlash(name)))
	stop := filepath.Join(r.cfg.Dir, "refs")
	for strings.HasPrefix(dir, stop+string(filepath.Separator)) {
		if os.Remove(dir) != nil {
			return
		}
		dir = filepath.Dir(dir)
	}
}

// allRefs lists the local copy's hash refs. The caller holds r.mu or owns r
// exclusively.
func (r *Repo) allRefs() (map[string]plumbing.Hash, error) {
	it, err := r.storage.IterReferences()
	if err != nil {
		return nil, localError("list local refs", err)
	}
	defer it.Close()
	refs := map[string]plumbing.Hash{}
	err = it.ForEach(func(ref *plumbing.Reference) error {
		if ref.Type() == plumbing.HashReference && strings.HasPrefix(ref.Name().String(), "refs/") {
			refs[ref.Name().String()] = ref.Hash()
		}
		return nil
	})
	if err != nil {
		return nil, localError("list local refs", err)
	}
	return refs, nil
}

func (r *Repo) localSnapshot() (Snapshot, error) {
	r.mu.Lock()
	refs, err := r.allRefs()
	r.mu.Unlock()
	if err != nil {
		return Snapshot{}, err
	}
	s := Snapshot{Branch: r.BranchRef(), Heads: map[string]string{}}
	for name, h := range refs {
		switch {
		case strings.HasPrefix(name, "refs/gitsync/"):
		case name == s.Branch:
			s.Tip = h.String()
		default:
			s.Heads[name] = h.String()
		}
	}
	return s, nil
}

func (r *Repo) changes(prev, next Snapshot) []Change {
	before := map[string]string{}
	after := map[string]string{}
	for k, v := range prev.Heads {
		before[k] = v
	}
	for k, v := range next.Heads {
		after[k] = v
	}
	if prev.Tip != "" {
		before[prev.Branch] = prev.Tip
	}
	if next.Tip != "" {
		after[next.Branch] = next.Tip
	}
	var out []Change
	for name, n := range after {
		o, ok := before[name]
		switch {
		case !ok:
			out = append(out, Change{Ref: name, Kind: Added, New: n})
		case o != n:
			ff, _ := r.Descends(n, o)
			out = append(out, Change{Ref: name, Kind: Moved, Old: o, New: n, FastForward: ff})
		}
	}
	for name, o := range before {
		if _, ok := after[name]; !ok {
			out = append(out, Change{Ref: name, Kind: Removed, Old: o})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Ref < out[j].Ref })
	return out
}

// maintain keeps the copy's size bounded: once fetches have left MaxPacks
// pack files, everything the kept refs reach is rewritten into one pack and
// the rest (closed pull requests, force-pushed history) is dropped. Loose
// refs are packed too. go-git writes fetched objects as packs, never loose,
// so there are no loose objects to prune.
func (r *Repo) maintain() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	packs, err := r.storage.ObjectPacks()
	if err != nil {
		return localError("list packs", err)
	}
	if err := r.storage.PackRefs(); err != nil {
		return localError("pack refs", err)
	}
	if len(packs) < r.cfg.MaxPacks {
		return nil
	}
	if err := r.repo.RepackObjects(&git.RepackConfig{}); err != nil {
		return localError("repack the local copy", err)
	}
	// Start afresh: the object cache and the open descriptors still hold
	// the deleted packs (whose disk space is freed only once closed).
	if err := r.storage.Close(); err != nil {
		return localError("close the repacked copy", err)
	}
	st, repo, err := openStorage(r.cfg)
	if err != nil {
		return err
	}
	r.storage, r.repo = st, repo
	return nil
}

// Packs reports how many pack files the local copy holds (for metrics and
// tests of maintenance).
func (r *Repo) Packs() (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	packs, err := r.storage.ObjectPacks()
	if err != nil {
		return 0, localError("list packs", err)
	}
	return len(packs), nil
}

// Pin keeps commit in the local copy under a name of the caller's (the
// applied commit, say), even after Branch moves away from it, so that its
// document and ancestry stay readable. Pinning again under the same name
// moves the pin.
func (r *Repo) Pin(name, commit string) error {
	h, err := r.commitHash(commit)
	if err != nil {
		return err
	}
	if name == "" || strings.ContainsAny(name, " ~^:?*[\\") || strings.Contains(name, "..") {
		return fail(&Error{Kind: KindConfig, Message: "a pin name must be a simple ref name, not " + quote(name)})
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, err := r.repo.CommitObject(h); err != nil {
		return unknownCommit(commit, err)
	}
	if err := r.storage.SetReference(plumbing.NewHashReference(plumbing.ReferenceName(pinPrefix+name), h)); err != nil {
		return localError("pin "+commit, err)
	}
	return nil
}

// Unpin removes a pin; its commits go at the next repack unless a ref
// still reaches them.
func (r *Repo) Unpin(name string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.storage.RemoveReference(plumbing.ReferenceName(pinPrefix + name)); err != nil {
		return localError("unpin "+name, err)
	}
	return nil
}
