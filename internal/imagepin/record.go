package imagepin

import (
	"context"

	"github.com/fleet-agent/fleet-agent/internal/state"
)

// The pin is one record in the store's kv space: the last answer for the
// configured image, whichever it was.
const (
	recordSpace = "nodeDaemonImage"
	recordKey   = "current"
)

// Read is the recorded pin in a transaction (nil: none yet).
func Read(tx *state.Tx) (*Pin, error) {
	var p Pin
	ok, err := tx.Get(recordSpace, recordKey, &p)
	if err != nil || !ok {
		return nil, err
	}
	return &p, nil
}

// StoreRecords keep the pin in the state store. Writes are fenced by the
// term ctx carries, so that an agent that no longer leads records nothing.
type StoreRecords struct{ Store *state.Store }

// LastPin is the recorded pin (nil: none).
func (r StoreRecords) LastPin(context.Context) (*Pin, error) {
	var p *Pin
	err := r.Store.View(func(tx *state.Tx) error {
		var err error
		p, err = Read(tx)
		return err
	})
	return p, err
}

// RecordPin replaces the recorded pin.
func (r StoreRecords) RecordPin(ctx context.Context, p Pin) error {
	return r.Store.UpdateIn(ctx, func(tx *state.Tx) error { return tx.Put(recordSpace, recordKey, p) })
}
