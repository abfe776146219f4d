//go:build race

package fleet

// raceDetector: the race detector slows the single-goroutine oracle
// comparisons tenfold and finds nothing in them.
const raceDetector = true
