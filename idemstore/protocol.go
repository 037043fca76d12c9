package idemstore

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Decide is the claim rule, the same for every store: what a claim for req
// finds in rec (found is false when the key has no record) at req.Now, and
// whether it takes the key for a new attempt (take), in doubt (doubt: an
// earlier attempt may have had its effect).
//
//	fingerprints differ (both not "")         ClaimMismatch
//	no record                                 ClaimAcquired, take
//	done                                      ClaimDone
//	skipped                                   ClaimSkipped
//	running, lease holds, holder alive        ClaimBusy
//	running, lease expired or holder gone     ClaimAcquired, take, doubt
//	failed, before NotBefore                  ClaimBackingOff
//	failed, from NotBefore on                 ClaimAcquired, take
//	unknown, req.TakeUnknown                  ClaimAcquired, take, doubt
//	unknown                                   ClaimUnknown
//	parked (or a status it does not know)     ClaimParked
//
// The holder of a running attempt whose lease holds is gone when
// [HolderGone] says its process has ended. A store that keeps its leases on
// a clock of its own (a database server's) passes that clock's time as
// req.Now. A store that keeps a retention horizon passes a period the
// horizon covers, record or not, as found with Status done.
//
// When the claim takes a running attempt over, the store counts it as a
// failure (Record.Failures + 1) and records [AbandonedNote] as its
// LastError, in the same write that takes the key.
func Decide(rec Record, found bool, req ClaimRequest) (state ClaimState, take, doubt bool) {
	if !found {
		return ClaimAcquired, true, false
	}
	if Mismatch(rec.Fingerprint, req.Fingerprint) {
		return ClaimMismatch, false, false
	}
	switch rec.Status {
	case StatusDone:
		return ClaimDone, false, false
	case StatusSkipped:
		return ClaimSkipped, false, false
	case StatusRunning:
		if req.Now.Before(rec.LeaseUntil) && !HolderGone(rec.Owner) {
			return ClaimBusy, false, false
		}
		return ClaimAcquired, true, true // the holder died (its process is gone, or its lease expired) or stalled
	case StatusFailed:
		if req.Now.Before(rec.NotBefore) {
			return ClaimBackingOff, false, false
		}
		return ClaimAcquired, true, false
	case StatusUnknown:
		if req.TakeUnknown {
			return ClaimAcquired, true, true
		}
		return ClaimUnknown, false, false
	}
	return ClaimParked, false, false
}

// Mismatch reports whether a key whose record has fingerprint stored
// refuses a claim with fingerprint given: both are set and they differ. A
// call without one, or a record without one, is not checked.
func Mismatch(stored, given string) bool { return stored != "" && given != "" && stored != given }

// The notes (Record.LastError, ItemClaim's record) that a claim leaves when
// it takes over a running attempt that ended without a done mark. Each is a
// format with three %s verbs: the attempt's number, its owner, and its
// lease's end, in UTC with microseconds (2006-01-02T15:04:05.000000Z).
// [AbandonedNote] fills them in; a store that takes attempts over in SQL
// passes them as parameters to its format function (PostgreSQL's format,
// SQLite's printf), so that every store writes the same text.
const (
	// NoteDied: the lease still held, but the holder's process is gone
	// ([HolderGone]).
	NoteDied = "attempt %s by %s abandoned: its process died without a done mark (its lease ran to %s)"
	// NoteExpired: the lease expired.
	NoteExpired = "attempt %s by %s abandoned: lease expired at %s without a done mark"
)

// AbandonedNote is the note for rec's running attempt, taken over at now:
// [NoteDied] if its lease still held (its process was found gone),
// [NoteExpired] otherwise. A store whose records have no lease end (a
// lock that dies with its holder is the lease: the state file) gets the
// first part of NoteDied alone.
func AbandonedNote(rec Record, now time.Time) string {
	attempt := strconv.FormatInt(rec.Attempt, 10)
	switch {
	case rec.LeaseUntil.IsZero():
		died, _, _ := strings.Cut(NoteDied, " (")
		return fmt.Sprintf(died, attempt, rec.Owner)
	case now.Before(rec.LeaseUntil):
		return fmt.Sprintf(NoteDied, attempt, rec.Owner, noteTime(rec.LeaseUntil))
	}
	return fmt.Sprintf(NoteExpired, attempt, rec.Owner, noteTime(rec.LeaseUntil))
}

// TakenOver is rec as a claim that takes its key reports it
// (Claim.Record) and writes it: a running attempt taken over counts as a
// failure (Failures + 1) and its LastError becomes [AbandonedNote] of rec
// at now; any other record is returned as it is.
func TakenOver(rec Record, now time.Time) Record {
	if rec.Status == StatusRunning {
		rec.Failures++
		rec.LastError = AbandonedNote(rec, now)
	}
	return rec
}

// noteTime is t as the notes show it.
func noteTime(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000000Z") }

// Prunable reports whether Prune may forget job's periods at or before
// through, given the job's catch-up cursor ("" when it has none) and the
// records at or before through that are not settled (done or skipped):
// unsettled of them, the earliest being first. It refuses a through after
// the cursor (catch-up could still reach those periods) and a through that
// covers a record that is not settled. The error matches
// [ErrPruneRefused].
func Prunable(job, through, cursor string, unsettled int64, first string) error {
	if cursor != "" && through > cursor {
		return fmt.Errorf("%w: %s through %s: catch-up has only settled up to %s; it could still reach the later periods",
			ErrPruneRefused, job, through, cursor)
	}
	if unsettled > 0 {
		return fmt.Errorf("%w: %s through %s: %d periods are not settled (the first is %s); resolve them first",
			ErrPruneRefused, job, through, unsettled, first)
	}
	return nil
}

// Validate reports an error for a Resolution that is none of ResolveDone,
// ResolveRetry and ResolveSkip. Stores check it before anything else.
func (r Resolution) Validate() error {
	if r < ResolveDone || r > ResolveSkip {
		return fmt.Errorf("idem: unknown resolution %d", r)
	}
	return nil
}

// Resolvable reports whether an operator may resolve rec (found is false
// when the key has no record) as to, at now: not a key that is done, nor
// one that a live attempt holds (by the rule of [Decide]), nor, to retry,
// one that has no record (it is runnable already). The error matches
// [ErrNotResolvable]. A store that keeps a retention horizon passes a
// period the horizon covers as found with Status done.
func Resolvable(rec Record, found bool, to Resolution, now time.Time) error {
	switch {
	case !found && to == ResolveRetry:
		return fmt.Errorf("%w: %s has no record; it is runnable already", ErrNotResolvable, rec.Key)
	case rec.Status == StatusDone:
		return fmt.Errorf("%w: %s is done", ErrNotResolvable, rec.Key)
	case rec.Status == StatusRunning && now.Before(rec.LeaseUntil) && !HolderGone(rec.Owner):
		return fmt.Errorf("%w: %s is held by attempt %d of %s until %s", ErrNotResolvable, rec.Key,
			rec.Attempt, rec.Owner, rec.LeaseUntil.UTC().Format(time.RFC3339))
	}
	return nil
}

// Resolved is the status and the note (Record.LastError) that resolving
// rec as to leaves: done with no note; skipped, or failed (runnable at
// once, its failure count cleared, NotBefore and lease cleared by the
// store), with a note that says what the record was and, for a retry, its
// last error.
func Resolved(rec Record, to Resolution) (status Status, note string) {
	prev := string(rec.Status)
	if prev == "" {
		prev = "none"
	}
	switch to {
	case ResolveDone:
		return StatusDone, ""
	case ResolveSkip:
		return StatusSkipped, "skipped without running (was " + prev + ")"
	}
	note = "resolved for retry (was " + prev + ")"
	if rec.LastError != "" {
		note += "; previous error: " + rec.LastError
	}
	return StatusFailed, note
}

// LeaseLost is the error a store returns when attempt no longer holds key:
// a renewal or an end, fenced by the attempt number, found a newer attempt
// (or none). It matches [ErrLeaseLost] and names the key and the attempt.
func LeaseLost(key Key, attempt int64) error {
	return fmt.Errorf("%w: %s attempt %d", ErrLeaseLost, key, attempt)
}

// Check reports whether an attempt can end as e.Status (done, failed,
// unknown, parked or skipped); store names the store in the error. A store
// checks it before writing anything.
func (e End) Check(store string, key Key) error {
	switch e.Status {
	case StatusDone, StatusFailed, StatusUnknown, StatusParked, StatusSkipped:
		return nil
	}
	return fmt.Errorf("%s: finish %s: cannot end an attempt as %q", store, key, e.Status)
}

// BackoffDelay is how long after the finisher's time the key may be tried
// again: e.NotBefore - e.Now, or from the local clock when Now is zero. ok is
// false when e sets no deadline. A store that keeps time on its server
// stores the server's time plus d, so that hosts whose clocks differ agree
// on the deadline.
func (e End) BackoffDelay() (d time.Duration, ok bool) {
	if e.NotBefore.IsZero() {
		return 0, false
	}
	if e.Now.IsZero() {
		return time.Until(e.NotBefore), true
	}
	return e.NotBefore.Sub(e.Now), true
}

// KeptFingerprint is the fingerprint a claim that takes a key writes: the
// record's (stored), or the request's (given) when the record has none.
func KeptFingerprint(stored, given string) string {
	if stored != "" {
		return stored
	}
	return given
}
