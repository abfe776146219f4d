package state

import (
	"encoding/json"
	"fmt"
)

// Applied is the record of the last apply: the document drift is measured
// against (docs/commands.md, status).
type Applied struct {
	// Document is the applied document's canonical bytes.
	Document  json.RawMessage `json:"document"`
	PlanHash  string          `json:"planHash"`
	Commit    string          `json:"commit,omitempty"`
	Prune     bool            `json:"prune"`
	AppliedBy string          `json:"appliedBy"`
	AppliedAt int64           `json:"appliedAt"` // Unix ms
	CheckedAt int64           `json:"checkedAt,omitempty"`
}

// Applied returns the applied record, if a document was ever applied.
func (t *Tx) Applied() (*Applied, error) {
	var a Applied
	ok, err := t.getJSON(bucketApplied, keyCurrent, &a)
	if err != nil || !ok {
		return nil, err
	}
	return &a, nil
}

// SetApplied records the applied document.
func (t *Tx) SetApplied(a Applied) error { return t.putJSON(bucketApplied, keyCurrent, a) }

// Drift is the result of the last drift check.
type Drift struct {
	// Changes are the changes that do something (never the unchanged).
	Changes   json.RawMessage `json:"changes"`
	Summary   json.RawMessage `json:"summary"`
	Blocked   bool            `json:"blocked"`
	PlanHash  string          `json:"planHash"`
	DriftHash string          `json:"driftHash"`
	Error     string          `json:"error,omitempty"`
	CheckedAt int64           `json:"checkedAt"`
	// Reported is the drift hash last reported (a comment and a status),
	// so each distinct drift is reported once.
	Reported string `json:"reported,omitempty"`
}

// Drift returns the recorded drift, if any.
func (t *Tx) Drift() (*Drift, error) {
	var d Drift
	ok, err := t.getJSON(bucketDrift, keyCurrent, &d)
	if err != nil || !ok {
		return nil, err
	}
	return &d, nil
}

// SetDrift records a drift check; nil clears it.
func (t *Tx) SetDrift(d *Drift) error {
	if d == nil {
		return t.tx.Bucket(bucketDrift).Delete(keyCurrent)
	}
	return t.putJSON(bucketDrift, keyCurrent, d)
}

// AuditRow is one line of the audit log: a call an apply made, an apply,
// or a break-glass edit.
type AuditRow struct {
	Seq      uint64          `json:"seq"`
	At       int64           `json:"at"` // Unix ms
	Who      string          `json:"who"`
	Action   string          `json:"action"` // "call", "apply", "edit", "edit-refused", "heal", "drain-force"
	Method   string          `json:"method,omitempty"`
	Params   json.RawMessage `json:"params,omitempty"`
	PlanHash string          `json:"planHash,omitempty"`
	Commit   string          `json:"commit,omitempty"`
	Calls    int             `json:"calls,omitempty"`
}

// AppendAudit appends a row; its sequence number is assigned here.
func (t *Tx) AppendAudit(r AuditRow) error {
	b := t.tx.Bucket(bucketAudit)
	seq, err := b.NextSequence()
	if err != nil {
		return err
	}
	r.Seq = seq
	data, err := json.Marshal(r)
	if err != nil {
		return err
	}
	if t.auditKeep > 0 && seq > t.auditKeep {
		// On etcd the log keeps its newest rows only: each row in drops
		// the one that many rows older (a backup keeps what it holds).
		if err := b.Delete(u64(seq - t.auditKeep)); err != nil {
			return err
		}
	}
	return b.Put(u64(seq), data)
}

// Audit returns the audit rows in order.
func (t *Tx) Audit() ([]AuditRow, error) {
	var rows []AuditRow
	err := t.tx.Bucket(bucketAudit).ForEach(func(k, v []byte) error {
		var r AuditRow
		if err := json.Unmarshal(v, &r); err != nil {
			return fmt.Errorf("audit row %x: %w", k, err)
		}
		rows = append(rows, r)
		return nil
	})
	return rows, err
}

// LastAudit returns the newest audit row that match accepts, reading from
// the end so that finding the last change costs the rows after it, not the
// whole history; nil when none matches.
func (t *Tx) LastAudit(match func(AuditRow) bool) (*AuditRow, error) {
	var found *AuditRow
	err := t.tx.Bucket(bucketAudit).Reverse(func(k, v []byte) (bool, error) {
		var r AuditRow
		if err := json.Unmarshal(v, &r); err != nil {
			return false, fmt.Errorf("audit row %x: %w", k, err)
		}
		if match(r) {
			found = &r
			return false, nil
		}
		return true, nil
	})
	return found, err
}

// Get and Put keep small records of the agent's own (reviewed plans,
// proposals, cursors) under a named bucket of the kv space.
func (t *Tx) Get(space, key string, v any) (bool, error) {
	b := t.tx.Bucket(bucketKV).Bucket([]byte(space))
	if b == nil {
		return false, nil
	}
	data := b.Get([]byte(key))
	if data == nil {
		return false, nil
	}
	return true, json.Unmarshal(data, v)
}

// Put writes a record under space and key.
func (t *Tx) Put(space, key string, v any) error {
	b, err := t.tx.Bucket(bucketKV).CreateBucketIfNotExists([]byte(space))
	if err != nil {
		return err
	}
	return putIn(b, key, v)
}

// putIn writes v as JSON under key in b.
func putIn(b kvBucket, key string, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return b.Put([]byte(key), data)
}

// Delete removes a record.
func (t *Tx) Delete(space, key string) error {
	b := t.tx.Bucket(bucketKV).Bucket([]byte(space))
	if b == nil {
		return nil
	}
	return b.Delete([]byte(key))
}

// ForEach visits the records of a space in key order.
func (t *Tx) ForEach(space string, fn func(key string, value []byte) error) error {
	b := t.tx.Bucket(bucketKV).Bucket([]byte(space))
	if b == nil {
		return nil
	}
	return b.ForEach(func(k, v []byte) error { return fn(string(k), v) })
}
