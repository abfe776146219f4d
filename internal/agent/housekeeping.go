package agent

import (
	"encoding/json"
	"time"

	"github.com/fleet-agent/fleet-agent/internal/state"
)

// KeepRecords is how long reviewed plans and refusals are kept: long enough
// for any pull request to be merged after its plan, short enough that the
// state file does not grow with every head ever pushed.
const KeepRecords = 90 * 24 * time.Hour

// housekeep drops reviewed plans and refusals older than KeepRecords, once
// a day; the refusal of the current tip stays, or it would be reported again.
func (a *Agent) housekeep(tip string) {
	now := a.clock.Now()
	a.mu.Lock()
	due := now.Sub(a.lastHousekeeping) >= 24*time.Hour
	if due {
		a.lastHousekeeping = now
	}
	a.mu.Unlock()
	if !due {
		return
	}
	cutoff := now.Add(-KeepRecords).UnixMilli()
	dropped := 0
	err := a.store.Update(func(tx *state.Tx) error {
		for _, space := range []string{spaceReviewed, spaceRefused} {
			var old []string
			err := tx.ForEach(space, func(k string, v []byte) error {
				var rec struct {
					At int64 `json:"at"`
				}
				if json.Unmarshal(v, &rec) == nil && rec.At < cutoff && !(space == spaceRefused && k == tip) {
					old = append(old, k)
				}
				return nil
			})
			if err != nil {
				return err
			}
			for _, k := range old {
				if err := tx.Delete(space, k); err != nil {
					return err
				}
			}
			dropped += len(old)
		}
		return nil
	})
	if err != nil {
		a.log.Warn().Err(err).Msg("housekeeping failed")
		return
	}
	if dropped > 0 {
		a.log.Info().Int("records", dropped).Msg("dropped reviewed plans and refusals older than 90 days")
	}
}
