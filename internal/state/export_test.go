package state

import "time"

// CrashAt makes the store's large commits stop after the step where at
// says true ("chunk N", "head", "roll N"), as a process killed there.
func CrashAt(s *Store, at func(step string) bool) { s.be.(*etcdBackend).crash = at }

// Die drops the store's connection to etcd without resigning or revoking:
// what a SIGKILL leaves behind (the lease runs out at etcd on its own).
func Die(s *Store) {
	be := s.be.(*etcdBackend)
	be.mu.Lock()
	l := be.lead
	be.mu.Unlock()
	if l != nil {
		// lose would revoke; a killed process does not.
		l.mu.Lock()
		l.lostWhy = "killed"
		close(l.lost)
		l.mu.Unlock()
		l.cancel()
	}
	_ = be.cli.Close()
}

// ErrCrashed is what a commit stopped by CrashAt returns.
var ErrCrashed = errCrashed

// HeldUntil is when l's hold ends (or ended) on the store's clock: the
// latest instant it answered as the leader.
func HeldUntil(l *Leadership) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.validUntil
}

// WonAt is when l's store began to answer as the leader, on its clock.
func WonAt(l *Leadership) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.wonAt
}
