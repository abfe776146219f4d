package substrate

import "github.com/fleet-agent/fleet-agent/internal/substrate/opjournal"

// Point is one place between journal steps where a test may crash the
// reconciler; the campaign lists and covers every one.
type Point = opjournal.Point

// PointKind says where a crash point is.
type PointKind = opjournal.PointKind

// The kinds of crash points.
const (
	PointTransition = opjournal.PointTransition
	PointBeforeCall = opjournal.PointBeforeCall
	PointAfterCall  = opjournal.PointAfterCall
	// The drain calls' points (their Step: drainRemoved, drainReplaced).
	PointBeforeDrain   = pointBeforeDrain
	PointAfterDrain    = pointAfterDrain
	PointBeforeUndrain = pointBeforeUndrain
	PointAfterUndrain  = pointAfterUndrain
)

// SetCrashAt makes every reconciler built from o ask at at every point
// between journal steps; true stops it there: from then on nothing is
// written or called, as if the process had been killed.
func SetCrashAt(o *Options, at func(Point) bool) { o.crashAt = at }

// Crash stops the reconciler as a kill would: every pass stops at its next
// step without writing or calling anything more, and no cleanup runs. It
// returns once the passes have stopped; the caller then closes the store.
func (r *Reconciler) Crash() {
	r.crashed.Store(true)
	r.wg.Wait()
}

// IsCrashed reports whether err comes from a crash a test asked for.
func IsCrashed(err error) bool { return isCrashed(err) }
