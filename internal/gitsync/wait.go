package gitsync

import (
	"context"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"
)

// Waiter paces the agent's polls: Wait returns when the interval (less a
// little jitter) has passed on the injected clock, when Wake is called (a
// webhook), or, for a local remote, when its refs change on disk. While
// the Repo backs off after failures, Wait returns only when the backoff
// ends; a wake that arrives meanwhile is kept for the next Wait.
//
//	w, _ := repo.NewWaiter(time.Minute)
//	defer w.Close()
//	for ctx.Err() == nil {
//		snap, err := repo.Poll(ctx)
//		...
//		_ = w.Wait(ctx)
//	}
type Waiter struct {
	repo     *Repo
	interval time.Duration
	// jitter takes up to this fraction off each interval, never adds: so
	// that agents started together spread out, and a poll is never late.
	jitter float64

	wake    chan struct{}
	watcher *fsnotify.Watcher
	done    chan struct{}
	wg      sync.WaitGroup

	randMu sync.Mutex
	rand   *rand.Rand
}

// Jitter is the fraction of the interval a Waiter may take off.
const Jitter = 0.1

// NewWaiter makes a Waiter for this repository. For a local remote
// (file:// or a path) it watches the remote's refs directory and
// packed-refs; the watch is best effort: when it cannot be set up, the
// interval still applies.
func (r *Repo) NewWaiter(interval time.Duration) (*Waiter, error) {
	if interval <= 0 {
		return nil, fail(&Error{Kind: KindConfig, Message: "git.interval must be positive"})
	}
	w := &Waiter{
		repo:     r,
		interval: interval,
		jitter:   Jitter,
		wake:     make(chan struct{}, 1),
		done:     make(chan struct{}),
		rand:     rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), uint64(os.Getpid()))),
	}
	if r.remote.gitDir != "" {
		if err := w.watch(r.remote.gitDir); err != nil {
			// Not fatal: the interval still applies.
			w.watcher = nil
		}
	}
	return w, nil
}

// Wake makes the current or next Wait return at once (unless backing off).
// Wakes coalesce: many wakes before a Wait make one return.
func (w *Waiter) Wake() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// Wait blocks until the next poll is due. It returns ctx's error when ctx
// ends first, nil otherwise.
func (w *Waiter) Wait(ctx context.Context) error {
	clk := w.repo.cfg.Clock
	if at := w.repo.retryAt(); !at.IsZero() {
		if d := at.Sub(clk.Now()); d > 0 {
			select {
			case <-clk.After(d):
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
	select {
	case <-clk.After(w.next()):
	case <-w.wake:
	case <-ctx.Done():
		return ctx.Err()
	}
	return nil
}

// next is the interval less a random part of up to jitter of it.
func (w *Waiter) next() time.Duration {
	w.randMu.Lock()
	f := w.rand.Float64()
	w.randMu.Unlock()
	return w.interval - time.Duration(f*w.jitter*float64(w.interval))
}

// Close stops watching the file system.
func (w *Waiter) Close() error {
	if w.watcher == nil {
		return nil
	}
	select {
	case <-w.done:
		return nil
	default:
	}
	close(w.done)
	err := w.watcher.Close()
	w.wg.Wait()
	return err
}

// watch sets up fsnotify on a local repository: the git directory itself
// (for packed-refs and HEAD) and every directory under refs/ (fsnotify is
// not recursive; new directories are added as they appear).
func (w *Waiter) watch(gitDir string) error {
	fw, err := fsnotify.NewWatcher()
	if err != nil {
		return err
	}
	if err := fw.Add(gitDir); err != nil {
		_ = fw.Close()
		return err
	}
	refs := filepath.Join(gitDir, "refs")
	_ = filepath.WalkDir(refs, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			_ = fw.Add(p)
		}
		return nil
	})
	w.watcher = fw
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		for {
			select {
			case <-w.done:
				return
			case ev, ok := <-fw.Events:
				if !ok {
					return
				}
				if w.relevant(gitDir, refs, ev) {
					w.Wake()
				}
			case _, ok := <-fw.Errors:
				if !ok {
					return
				}
			}
		}
	}()
	return nil
}

func (w *Waiter) relevant(gitDir, refs string, ev fsnotify.Event) bool {
	name := ev.Name
	if strings.HasSuffix(name, ".lock") {
		// git writes x.lock and renames it to x: the rename is the event
		// that matters.
		return false
	}
	if filepath.Dir(name) == gitDir {
		base := filepath.Base(name)
		return base == "packed-refs" || base == "HEAD"
	}
	if !strings.HasPrefix(name, refs+string(filepath.Separator)) {
		return false
	}
	if ev.Has(fsnotify.Create) {
		if fi, err := os.Stat(name); err == nil && fi.IsDir() {
			_ = w.watcher.Add(name)
			// A branch named a/b creates refs/heads/a and then the ref.
			_ = filepath.WalkDir(name, func(p string, d os.DirEntry, err error) error {
				if err == nil && d.IsDir() && p != name {
					_ = w.watcher.Add(p)
				}
				return nil
			})
		}
	}
	return true
}
