package idemstore

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// ErrNotRerunnable: a re-run was asked for a period that cannot be run
// again as it is: one that never ran (run it), is parked (reset it), has
// an unknown outcome (resolve it first), or was pruned by retention. The
// error names the key and the command that fits. Nothing was written: a
// request that names such a period changes none of its periods.
var ErrNotRerunnable = errors.New("idem: period cannot be re-run")

// RerunRequest asks a store to run periods again that are done (a re-run
// to repair data: idem.Rerun).
type RerunRequest struct {
	Keys []Key
	// RequestID identifies the request: the same request sent again (a
	// retrying script, a double click) re-runs nothing more. Required.
	RequestID string
	Reason    string // why, for people (required)
	By        string // who asked: an OS user, an operator page's remote address, the caller's string
	Now       time.Time
}

// Validate reports a request the store must refuse before writing.
func (r RerunRequest) Validate() error {
	switch {
	case len(r.Keys) == 0:
		return errors.New("idem: re-run: no periods named")
	case r.RequestID == "":
		return errors.New("idem: re-run: the request id is empty (the same request sent twice must re-run once: give it an id)")
	case r.Reason == "":
		return errors.New("idem: re-run: the reason is empty (say why, for the history)")
	}
	if err := ValidatePart("re-run request id", r.RequestID); err != nil {
		return fmt.Errorf("idem: %w", err)
	}
	for _, k := range r.Keys {
		if err := k.Validate(); err != nil {
			return err
		}
	}
	return nil
}

// RerunState is what a re-run request did to one period.
type RerunState int

const (
	// RerunQueued: the period was done; it has a new revision, runnable at
	// once by the next trigger.
	RerunQueued RerunState = iota + 1
	// RerunAfterRun: an attempt holds the period; when it ends done, the
	// period gets the new revision.
	RerunAfterRun
	// RerunDue: the period is not done (it failed and will run again): the
	// request is recorded with the revision that will run.
	RerunDue
	// RerunSeen: this request id was recorded for the period before:
	// nothing changed.
	RerunSeen
)

func (s RerunState) String() string {
	switch s {
	case RerunQueued:
		return "queued"
	case RerunAfterRun:
		return "after the running attempt"
	case RerunDue:
		return "due already"
	case RerunSeen:
		return "seen before"
	}
	return fmt.Sprintf("RerunState(%d)", int(s))
}

// RerunOutcome is what a re-run request did to one of its periods.
type RerunOutcome struct {
	Key      Key
	State    RerunState
	Revision int64 // the revision that will run (or ran) for the request
}

// Rerunner is a store that runs done periods again on request (idem.Rerun).
// Rerun applies the request to every key in one atomic step, or to none:
// a key that cannot be re-run ([Rerunnable]) fails the whole request with
// an error matching [ErrNotRerunnable]. It is durable before it returns.
//
// For each key, by its record: done or skipped → revision+1, status failed
// with no backoff and no failure counted (runnable at once; its attempt
// numbers go on: fencing tokens only grow), the request recorded
// (RerunQueued); running → the request recorded, and the attempt's done
// mark turns the period into that revision as above (RerunAfterRun; more
// requests meanwhile share it); failed → recorded with the current
// revision (RerunDue); a request id recorded for the key before →
// RerunSeen, nothing written. A request whose id is recorded for any of
// its keys was sent before: every key is RerunSeen and nothing is
// written, a key the first sending did not name too (its revision then
// is the key's current one): a request sent again with its dependents
// computed anew (idem.RerunWithDependents) re-runs nothing more.
type Rerunner interface {
	Rerun(ctx context.Context, req RerunRequest) ([]RerunOutcome, error)

	// RerunsDue returns, oldest first, the periods of job at or before
	// through (the job's catch-up cursor) whose re-run has not run yet
	// (a revision above 0 and not done): what catch-up runs before the
	// periods after its cursor.
	RerunsDue(ctx context.Context, job, through string) ([]string, error)
}

// Rerunnable is the rule every store applies to a key's record before it
// re-runs it (found: the key has a record; pruned: the key is at or below
// its job's retention horizon).
func Rerunnable(rec Record, found, pruned bool) error {
	key := rec.Key
	switch {
	case pruned:
		return fmt.Errorf("%w: %s was pruned by the job's retention (its history is gone); it cannot be re-run", ErrNotRerunnable, key)
	case !found:
		return fmt.Errorf("%w: %s never ran; run it (idem run %s %s), there is nothing to re-run", ErrNotRerunnable, key, QuotePart(key.Job), QuotePart(key.Period))
	case rec.Status == StatusParked:
		return fmt.Errorf("%w: %s is parked (%s); reset it to run it again: idem reset %s %s", ErrNotRerunnable, key, rec.LastError, QuotePart(key.Job), QuotePart(key.Period))
	case rec.Status == StatusUnknown:
		return fmt.Errorf("%w: %s has an unknown outcome (%s); settle it first: idem resolve %s %s --done or --retry", ErrNotRerunnable, key, rec.LastError, QuotePart(key.Job), QuotePart(key.Period))
	}
	return nil
}

// RerunNote is the LastError of a period turned into a new revision by a
// re-run request, for people.
func RerunNote(req RerunRequest, revision int64) string {
	by := req.By
	if by == "" {
		by = "?"
	}
	return fmt.Sprintf("re-run requested as revision %d by %s (request %s): %s", revision, by, req.RequestID, req.Reason)
}
