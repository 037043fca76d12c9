package idem

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/idemgo/idem/idemstore"
)

// StateFileVersion is the version of the state file format that this
// version of idem writes. A newer file is refused as corrupt; an older one
// is read, and written back in this version. Version 2 added the
// fingerprints (idem.WithParams) and the value of the last done period
// (idem.RunValue): fields a version-1 file does not have, read as none.
const StateFileVersion = 2

// ErrCorruptState: a state file is empty, truncated, not JSON, of the wrong
// shape, or from a newer version of idem. It is never overwritten or reset
// automatically; see [RepairStateFile].
var ErrCorruptState = errors.New("idem: corrupt state file")

// stateDoc is the file's content.
type stateDoc struct {
	Version int                  `json:"version"`
	Jobs    map[string]*jobState `json:"jobs"`
}

// jobState is one job's watermark and pending attempt.
type jobState struct {
	LastDonePeriod string    `json:"lastDonePeriod"`
	Status         Status    `json:"status"` // status of PendingPeriod, or "done"
	PendingPeriod  string    `json:"pendingPeriod"`
	Attempt        int64     `json:"attempt"`
	Failures       int       `json:"failures"`
	Owner          string    `json:"owner,omitempty"`
	NotBefore      time.Time `json:"notBefore,omitzero"`
	LastError      string    `json:"lastError,omitempty"`
	Updated        time.Time `json:"updated,omitzero"`

	// Version 2. Fingerprint is PendingPeriod's; DoneFingerprint and
	// DoneValue are LastDonePeriod's (an older done period has neither).
	Fingerprint     string `json:"fingerprint,omitempty"`
	DoneFingerprint string `json:"doneFingerprint,omitempty"`
	DoneValue       []byte `json:"doneValue,omitempty"`
}

// CorruptStateError reports a state file that cannot be used. It matches
// ErrCorruptState.
type CorruptStateError struct {
	Path   string
	Reason string
}

func (e *CorruptStateError) Error() string {
	return fmt.Sprintf("idem: corrupt state file %s: %s (left untouched; see idem.RepairStateFile)", e.Path, e.Reason)
}

// Is reports whether target is ErrCorruptState.
func (e *CorruptStateError) Is(target error) bool { return target == ErrCorruptState }

// decodeState parses and checks a state file's content.
func decodeState(path string, b []byte) (*stateDoc, error) {
	bad := func(format string, a ...any) error {
		return &CorruptStateError{Path: path, Reason: fmt.Sprintf(format, a...)}
	}
	if len(bytes.TrimSpace(b)) == 0 {
		return nil, bad("the file is empty")
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var doc stateDoc
	if err := dec.Decode(&doc); err != nil {
		return nil, bad("%v", err)
	}
	if dec.More() {
		return nil, bad("data after the JSON document")
	}
	switch {
	case doc.Version > StateFileVersion:
		return nil, bad("version %d is newer than this idem's %d", doc.Version, StateFileVersion)
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
		case StatusDone:
			if st.PendingPeriod != "" || st.LastDonePeriod == "" {
				return nil, bad("job %q: status done needs lastDonePeriod and no pendingPeriod", job)
			}
		case StatusRunning, StatusFailed, StatusUnknown, StatusParked:
			if st.PendingPeriod == "" || st.PendingPeriod <= st.LastDonePeriod {
				return nil, bad("job %q: status %s needs a pendingPeriod after lastDonePeriod", job, st.Status)
			}
		default:
			return nil, bad("job %q: unknown status %q", job, st.Status)
		}
	}
	return &doc, nil
}

func (s *StateFile) read() (*stateDoc, error) {
	b, err := readRegular(s.path)
	if errors.Is(err, os.ErrNotExist) {
		return &stateDoc{Version: StateFileVersion, Jobs: map[string]*jobState{}}, nil
	}
	var pe *os.PathError
	if errors.As(err, &pe) {
		return nil, fmt.Errorf("idem: state file %s: %w", s.path, err)
	}
	if err != nil {
		return nil, err
	}
	return decodeState(s.path, b)
}

// createErr reports a file (the state file's temp file, or a lock file at
// p) that could not be created, saying so plainly when the directory cannot
// be written.
func (s *StateFile) createErr(p string, err error) error {
	what := "state file " + s.path
	if p != s.path {
		what = "state file lock " + p
	}
	if msg := unwritableDir(s.dir); msg != "" && (errors.Is(err, fs.ErrPermission) || errors.Is(err, syscall.EROFS)) {
		return fmt.Errorf("idem: %s: cannot write: %s: %w", what, msg, err)
	}
	return fmt.Errorf("idem: %s: %w", what, err)
}

// record is what the file says of key.
func (st *jobState) record(key Key) (Record, bool) {
	if st == nil {
		return Record{Key: key}, false
	}
	r := Record{Key: key, Attempt: st.Attempt, Failures: st.Failures, Owner: st.Owner,
		NotBefore: st.NotBefore, LastError: st.LastError, Updated: st.Updated}
	switch {
	case key.Period <= st.LastDonePeriod:
		r.Status, r.Failures, r.NotBefore, r.LastError = StatusDone, 0, time.Time{}, ""
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
	return Record{Key: key}, false
}

// RepairStateFile replaces a corrupt state file by a valid one whose
// watermarks are lastDone (job → last done period), which the operator
// establishes from logs or the downstream. The corrupt file is kept beside
// it, renamed to path + ".corrupt-<unix seconds>"; the new name is returned.
// It refuses to touch a file that is not corrupt.
func RepairStateFile(path string, lastDone map[string]string) (kept string, err error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", err
	}
	if abs, err = resolveStateFile(abs); err != nil {
		return "", err
	}
	b, err := readRegular(abs)
	var pe *os.PathError
	if errors.As(err, &pe) {
		return "", fmt.Errorf("idem: repair %s: %w", abs, err)
	}
	if err != nil {
		return "", err
	}
	if _, err := decodeState(abs, b); err == nil {
		return "", fmt.Errorf("idem: repair %s: the file is not corrupt; refusing to replace it", abs)
	}
	doc := &stateDoc{Version: StateFileVersion, Jobs: map[string]*jobState{}}
	for job, p := range lastDone {
		k := Key{Job: job, Period: p}
		if err := k.Validate(); err != nil {
			return "", err
		}
		doc.Jobs[job] = &jobState{LastDonePeriod: p, Status: StatusDone, Updated: time.Now()}
	}
	kept = fmt.Sprintf("%s.corrupt-%d", abs, time.Now().Unix())
	if err := os.Link(abs, kept); err != nil {
		return "", fmt.Errorf("idem: repair %s: keep the corrupt file: %w", abs, err)
	}
	s := &StateFile{path: abs, dir: filepath.Dir(abs)}
	unlock, err := s.lockFile()
	if err != nil {
		return "", err
	}
	defer unlock()
	if err := s.write(context.Background(), Key{}, doc); err != nil {
		return "", err
	}
	return kept, nil
}
