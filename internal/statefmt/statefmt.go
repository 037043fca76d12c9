// Package statefmt is the state file's format (idem.StateFile): its
// document, the decoder that checks it, and what the file says of a key. It
// imports no database driver, so that its fuzz test (FuzzDecodeState) builds
// in seconds; package idem keeps the public names (ErrCorruptState,
// CorruptStateError).
package statefmt

import (
	"bytes"
	"encoding/json"
	"fmt"
	"time"

	"github.com/idemgo/idem/idemstore"
)

// Version is the version of the state file format that this version of idem
// writes.
const Version = 2

// Doc is the file's content.
type Doc struct {
	Version int             `json:"version"`
	Jobs    map[string]*Job `json:"jobs"`
}

// Job is one job's watermark and pending attempt.
type Job struct {
	LastDonePeriod string           `json:"lastDonePeriod"`
	Status         idemstore.Status `json:"status"` // status of PendingPeriod, or "done"
	PendingPeriod  string           `json:"pendingPeriod"`
	Attempt        int64            `json:"attempt"`
	Failures       int              `json:"failures"`
	Owner          string           `json:"owner,omitempty"`
	NotBefore      time.Time        `json:"notBefore,omitzero"`
	LastError      string           `json:"lastError,omitempty"`
	Updated        time.Time        `json:"updated,omitzero"`

	// Version 2. Fingerprint is PendingPeriod's; DoneFingerprint and
	// DoneValue are LastDonePeriod's (an older done period has neither).
	Fingerprint     string `json:"fingerprint,omitempty"`
	DoneFingerprint string `json:"doneFingerprint,omitempty"`
	DoneValue       []byte `json:"doneValue,omitempty"`
}

// FormatError is why a file's content is not a valid state document.
type FormatError struct {
	Reason string
}

func (e *FormatError) Error() string { return e.Reason }

// Decode parses and checks a state file's content. Every error it returns
// is a *FormatError.
func Decode(b []byte) (*Doc, error) {
	bad := func(format string, a ...any) error {
		return &FormatError{Reason: fmt.Sprintf(format, a...)}
	}
	if len(bytes.TrimSpace(b)) == 0 {
		return nil, bad("the file is empty")
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var doc Doc
	if err := dec.Decode(&doc); err != nil {
		return nil, bad("%v", err)
	}
	if dec.More() {
		return nil, bad("data after the JSON document")
	}
	switch {
	case doc.Version > Version:
		return nil, bad("version %d is newer than this idem's %d", doc.Version, Version)
	case doc.Version < 1:
		return nil, bad("no version")
	case doc.Jobs == nil:
		return nil, bad(`no "jobs" object`)
	}
	for job, st := range doc.Jobs {
		if err := idemstore.ValidatePart("job", job); err != nil {
			return nil, bad("job %s: %v", idemstore.QuotePart(job), err)
		}
		if st == nil {
			return nil, bad("job %q: null", job)
		}
		switch {
		case st.Attempt < 0 || st.Failures < 0:
			return nil, bad("job %q: negative attempt or failures", job)
		case st.LastDonePeriod != "" && idemstore.ValidatePart("period", st.LastDonePeriod) != nil:
			return nil, bad("job %q: invalid lastDonePeriod", job)
		case st.PendingPeriod != "" && idemstore.ValidatePart("period", st.PendingPeriod) != nil:
			return nil, bad("job %q: invalid pendingPeriod", job)
		}
		switch st.Status {
		case idemstore.StatusDone:
			if st.PendingPeriod != "" || st.LastDonePeriod == "" {
				return nil, bad("job %q: status done needs lastDonePeriod and no pendingPeriod", job)
			}
		case idemstore.StatusRunning, idemstore.StatusFailed, idemstore.StatusUnknown, idemstore.StatusParked:
			if st.PendingPeriod == "" || st.PendingPeriod <= st.LastDonePeriod {
				return nil, bad("job %q: status %s needs a pendingPeriod after lastDonePeriod", job, st.Status)
			}
		default:
			return nil, bad("job %q: unknown status %q", job, st.Status)
		}
	}
	return &doc, nil
}

// Record is what the file says of key (st may be nil: nothing).
func (st *Job) Record(key idemstore.Key) (idemstore.Record, bool) {
	if st == nil {
		return idemstore.Record{Key: key}, false
	}
	r := idemstore.Record{Key: key, Attempt: st.Attempt, Failures: st.Failures, Owner: st.Owner,
		NotBefore: st.NotBefore, LastError: st.LastError, Updated: st.Updated}
	switch {
	case key.Period <= st.LastDonePeriod:
		r.Status, r.Failures, r.NotBefore, r.LastError = idemstore.StatusDone, 0, time.Time{}, ""
		if key.Period != st.LastDonePeriod {
			r.Attempt = 0 // done by the watermark; its own attempts, fingerprint and value are not kept
		} else {
			r.Fingerprint, r.Value = st.DoneFingerprint, st.DoneValue
		}
		return r, true
	case key.Period == st.PendingPeriod:
		r.Status, r.Fingerprint = st.Status, st.Fingerprint
		return r, true
	}
	return idemstore.Record{Key: key}, false
}
