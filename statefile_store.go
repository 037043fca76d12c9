package idem

import (
	"context"
	"fmt"
	"os"
	"slices"
	"time"

	"github.com/idemgo/idem/idemstore"
)

type heldLock struct {
	f           *os.File
	period      string
	attempt     int64
	fingerprint string // the claim's (idemstore.KeptFingerprint), written with the attempt's end
}

// periodShape is a period's pattern of digits: periods of one job must
// share it, so that string order is time order ("2026-9-30" would sort
// after "2026-10-01").
func periodShape(p string) string {
	b := []byte(p)
	for i, c := range b {
		if c >= '0' && c <= '9' {
			b[i] = '9'
		}
	}
	return string(b)
}

func checkShape(st *jobState, key Key) error {
	ref := st.LastDonePeriod
	if ref == "" {
		ref = st.PendingPeriod
	}
	if ref != "" && periodShape(ref) != periodShape(key.Period) {
		return fmt.Errorf("%w: period %q of job %q is not of the shape of %q; a job's periods must sort in time order as strings (zero-padded, like 2026-10-27)",
			ErrOutOfOrder, key.Period, key.Job, ref)
	}
	return nil
}

// Lookup implements [idemstore.Store].
func (s *StateFile) Lookup(ctx context.Context, key Key) (Record, bool, error) {
	if err := key.Validate(); err != nil {
		return Record{}, false, err
	}
	doc, err := s.read()
	if err != nil {
		return Record{}, false, err
	}
	rec, ok := doc.Jobs[key.Job].Record(key)
	return rec, ok, nil
}

// Claim implements [idemstore.Store]. The claim holds the job's lock until
// Finish.
func (s stateStore) Claim(ctx context.Context, req idemstore.ClaimRequest) (idemstore.Claim, error) {
	key := req.Key
	// Fast path: no lock, no write for a done period.
	doc, err := s.read()
	if err != nil {
		return idemstore.Claim{}, err
	}
	if rec, ok := doc.Jobs[key.Job].Record(key); ok && idemstore.Mismatch(rec.Fingerprint, req.Fingerprint) {
		return idemstore.Claim{State: idemstore.ClaimMismatch, Record: rec}, nil
	} else if ok && rec.Status == StatusDone {
		return idemstore.Claim{State: idemstore.ClaimDone, Record: rec}, nil
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	f, ok, err := s.tryLock(key.Job)
	if err != nil {
		return idemstore.Claim{}, err
	}
	if !ok {
		rec, _ := doc.Jobs[key.Job].Record(key)
		rec.Status = StatusRunning
		return idemstore.Claim{State: idemstore.ClaimBusy, Record: rec}, nil
	}
	keep := false
	defer func() {
		if !keep {
			s.unlockJob(key.Job, f)
		}
	}()
	// Under the job's lock, read again: the last holder may have just
	// finished. A job's state changes only under its lock (Claim, Finish,
	// Resolve, Start), which this claim holds, so this read needs the
	// file-wide lock only if the claim writes (below): every read sees a
	// whole file, as writes replace it.
	doc, err = s.read()
	if err != nil {
		return idemstore.Claim{}, err
	}
	st := doc.Jobs[key.Job]
	if st == nil {
		st = &jobState{Status: StatusDone}
	} else if err := checkShape(st, key); err != nil {
		return idemstore.Claim{}, err
	}
	rec, found := st.Record(key)
	if !found && st.PendingPeriod != "" {
		return idemstore.Claim{}, fmt.Errorf("%w: %s: period %s of job %q is %s (%s); it must be done, resolved or reset first",
			ErrOutOfOrder, key, st.PendingPeriod, key.Job, st.Status, st.LastError)
	}
	state, take, doubt := idemstore.Decide(rec, found, req)
	if rec.Status == StatusRunning && state != idemstore.ClaimMismatch {
		// We hold the lock, so its holder is gone: the attempt died.
		state, take, doubt = idemstore.ClaimAcquired, true, true
	}
	c := idemstore.Claim{State: state, Record: rec}
	if !take {
		return c, nil
	}
	// The attempt number must be new even when the claim writes nothing
	// (AtLeastOnce) and an earlier claim died before its end was written:
	// the job's lock file keeps the last number claimed.
	last, err := lastClaimed(f)
	if err != nil {
		return idemstore.Claim{}, fmt.Errorf("idem: state file lock %s: %w", f.Name(), err)
	}
	c.Attempt, c.Doubt = max(st.Attempt, last)+1, doubt
	if err := markClaimed(f, c.Attempt); err != nil {
		return idemstore.Claim{}, fmt.Errorf("idem: state file lock %s: %w", f.Name(), err)
	}
	c.Record = idemstore.TakenOver(rec, req.Now) // a running record has no lease end: its lock died with it
	fp := idemstore.KeptFingerprint(rec.Fingerprint, req.Fingerprint)
	if req.Durable || doubt {
		next := *st
		next.Status, next.PendingPeriod, next.Attempt, next.Owner = StatusRunning, key.Period, c.Attempt, req.Owner
		next.Fingerprint = fp
		next.Failures, next.LastError, next.NotBefore, next.Updated = c.Record.Failures, c.Record.LastError, time.Time{}, req.Now
		if err := s.writeJob(ctx, key, &next); err != nil {
			return idemstore.Claim{}, err // the lock is released, as on a crash
		}
	}
	keep = true
	s.held[key.Job] = &heldLock{f: f, period: key.Period, attempt: c.Attempt, fingerprint: fp}
	return c, nil
}

// writeJob writes st as key.Job's state, under the file-wide lock and over
// the file as read under it (the other jobs' states as they are now). The
// caller holds the job's lock.
func (s *StateFile) writeJob(ctx context.Context, key Key, st *jobState) error {
	doc, unlock, err := s.readLocked()
	if err != nil {
		return err
	}
	defer unlock()
	doc.Jobs[key.Job] = st
	return s.write(ctx, key, doc)
}

// holder returns the lock this process holds for key's attempt.
func (s *StateFile) holder(key Key, attempt int64) (*heldLock, error) {
	h := s.held[key.Job]
	if h == nil || h.period != key.Period || h.attempt != attempt {
		return nil, fmt.Errorf("%w: %s attempt %d holds no lock here", ErrLeaseLost, key, attempt)
	}
	return h, nil
}

// Renew implements [idemstore.Store]. The lock is the lease: renewing only
// checks that this process still holds it.
func (s stateStore) Renew(ctx context.Context, key Key, attempt int64, now time.Time, lease time.Duration) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, err := s.holder(key, attempt)
	return err
}

// Finish implements [idemstore.Store]. It writes the attempt's end durably and
// releases the job's lock. If the write fails (a full disk), the file is as
// it was and the lock stays held, so that the end can be written again; Run
// retries it a few times, and when it gives up it releases the lock (the
// next Run then finds the attempt died).
func (s stateStore) Finish(ctx context.Context, key Key, attempt int64, end idemstore.End) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	h, err := s.holder(key, attempt)
	if err != nil {
		return err
	}
	doc, unlock, err := s.readLocked()
	if err != nil {
		return err
	}
	defer unlock()
	prev := doc.Jobs[key.Job]
	next := jobState{Status: StatusDone}
	if prev != nil {
		next = *prev
	}
	next.Attempt, next.Owner, next.Updated = attempt, h.owner(), end.Now
	if end.Status == StatusDone {
		next.Status, next.LastDonePeriod, next.PendingPeriod = StatusDone, key.Period, ""
		next.Failures, next.NotBefore, next.LastError = 0, time.Time{}, ""
		next.DoneFingerprint, next.DoneValue, next.Fingerprint = h.fingerprint, end.Value, ""
	} else {
		next.Status, next.PendingPeriod = end.Status, key.Period
		next.Failures, next.NotBefore, next.LastError = end.Failures, end.NotBefore, end.Error
		next.Fingerprint = h.fingerprint
	}
	doc.Jobs[key.Job] = &next
	if err := s.write(ctx, key, doc); err != nil {
		return err
	}
	s.dropLock(key.Job)
	return nil
}

func (h *heldLock) owner() string { return idemstore.Owner() }

// dropLock releases the job's lock that an attempt of this process holds.
func (s *StateFile) dropLock(job string) {
	if h := s.held[job]; h != nil {
		delete(s.held, job)
		s.unlockJob(job, h.f)
	}
}

// Release implements [idemstore.Releaser]: it drops the job's lock that
// this process holds for key's attempt, without writing, as the kernel
// would when the process dies. Run calls it whenever an attempt ends
// without its end written: a crash point stopped the run, fn panicked, the
// lease was lost, or Finish kept failing. The next claim then finds the
// attempt died. For any other attempt it does nothing.
func (s stateStore) Release(key Key, attempt int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if h := s.held[key.Job]; h != nil && h.period == key.Period && h.attempt == attempt {
		s.dropLock(key.Job)
	}
}

// Resolve implements [idemstore.Store]. ResolveDone moves the job's watermark
// to key.Period (every earlier period counts as done); ResolveRetry makes the
// pending period runnable at once. It refuses while an attempt holds the job's
// lock.
func (s *StateFile) Resolve(ctx context.Context, key Key, to Resolution) error {
	if err := key.Validate(); err != nil {
		return err
	}
	if err := to.Validate(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	f, ok, err := s.tryLock(key.Job)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("%w: %s: an attempt holds the job's lock", ErrNotResolvable, key)
	}
	defer s.unlockJob(key.Job, f)
	doc, unlock, err := s.readLocked()
	if err != nil {
		return err
	}
	defer unlock()
	st := doc.Jobs[key.Job]
	if st == nil {
		st = &jobState{Status: StatusDone}
	} else if err := checkShape(st, key); err != nil {
		return err
	}
	rec, found := st.Record(key)
	if err := idemstore.Resolvable(rec, found, to, time.Now()); err != nil {
		return err
	}
	if st.PendingPeriod != "" && st.PendingPeriod != key.Period {
		return fmt.Errorf("%w: %s: period %s of the job is pending; resolve it first", ErrOutOfOrder, key, st.PendingPeriod)
	}
	next := *st
	status, note := idemstore.Resolved(rec, to)
	next.Updated, next.LastError, next.Failures, next.NotBefore = time.Now(), note, 0, time.Time{}
	if status == StatusDone || status == StatusSkipped { // a watermark cannot tell them apart
		next.Status, next.LastDonePeriod, next.PendingPeriod, next.LastError = StatusDone, key.Period, "", ""
		next.DoneFingerprint, next.DoneValue, next.Fingerprint = rec.Fingerprint, nil, "" // the pending period's fingerprint, if any
	} else {
		next.Status = status
	}
	doc.Jobs[key.Job] = &next
	return s.write(ctx, key, doc)
}

// Job implements [idemstore.CatchUpStore]: the job's watermark is both its
// cursor and its horizon.
func (s *StateFile) Job(ctx context.Context, job string) (JobState, error) {
	doc, err := s.read()
	if err != nil {
		return JobState{}, err
	}
	js := JobState{Job: job}
	if st := doc.Jobs[job]; st != nil {
		js.Cursor, js.Horizon = st.LastDonePeriod, st.LastDonePeriod
	}
	return js, nil
}

// Start implements [idemstore.CatchUpStore]. The job's cursor is its watermark,
// so for a job that has neither a watermark nor a pending period it writes the
// watermark before, durably: from then on every period at or before it counts
// as done (a Run of one returns AlreadyDone without running it), as for any
// watermark; the job's periods begin after it. A job that has a watermark, or a
// pending period (left by a Run, or by an older idem), is left as it is; with a
// pending period and no watermark the cursor stays "", and catch-up waits for
// that period ([ErrOutOfOrder]) until it is done or resolved. Start refuses,
// with an error matching [ErrInProgress], while an attempt holds the job's lock
// (an at-least-once Run that has written nothing yet).
func (s stateStore) Start(ctx context.Context, job, before string) (JobState, error) {
	key := Key{Job: job, Period: before}
	if err := key.Validate(); err != nil {
		return JobState{}, err
	}
	js, err := s.Job(ctx, job)
	if err != nil || js.Cursor != "" {
		return js, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	f, ok, err := s.tryLock(job)
	if err != nil {
		return JobState{}, err
	}
	if !ok {
		return JobState{}, fmt.Errorf("%w: %s: job %q: an attempt holds the job's lock; its catch-up can start once it ends",
			ErrInProgress, s.path, job)
	}
	defer s.unlockJob(job, f)
	doc, unlock, err := s.readLocked()
	if err != nil {
		return JobState{}, err
	}
	defer unlock()
	if st := doc.Jobs[job]; st != nil {
		return JobState{Job: job, Cursor: st.LastDonePeriod, Horizon: st.LastDonePeriod}, nil
	}
	doc.Jobs[job] = &jobState{LastDonePeriod: before, Status: StatusDone, Updated: s.clock.Now()}
	if err := s.write(ctx, key, doc); err != nil {
		return JobState{}, err
	}
	return JobState{Job: job, Cursor: before, Horizon: before}, nil
}

// Advance implements [idemstore.CatchUpStore]. The watermark moves only with
// done marks: advancing to a period at or before it does nothing, and past it
// is refused (it would mark the periods in between done).
func (s stateStore) Advance(ctx context.Context, job, period string) error {
	js, err := s.Job(ctx, job)
	if err != nil {
		return err
	}
	if period <= js.Cursor {
		return nil
	}
	return fmt.Errorf("%w: %s: cannot move the watermark of job %q from %q to %q without a done mark",
		ErrOutOfOrder, s.path, job, js.Cursor, period)
}

// List implements [idemstore.Lister]: one record per job, for its pending
// period if it has one, else its last done period.
func (s *StateFile) List(ctx context.Context, f Filter) ([]Record, error) {
	doc, err := s.read()
	if err != nil {
		return nil, err
	}
	jobs := make([]string, 0, len(doc.Jobs))
	for job := range doc.Jobs {
		jobs = append(jobs, job)
	}
	slices.Sort(jobs)
	var recs []Record
	for _, job := range jobs {
		st := doc.Jobs[job]
		period := st.PendingPeriod
		if period == "" {
			period = st.LastDonePeriod
		}
		rec, _ := st.Record(Key{Job: job, Period: period})
		if (f.Job != "" && f.Job != job) || (f.Status != "" && f.Status != rec.Status) {
			continue
		}
		if f.Limit > 0 && len(recs) == f.Limit {
			break
		}
		recs = append(recs, rec)
	}
	return recs, nil
}

// Prune implements [idemstore.CatchUpStore]. A state file keeps no per-period
// records, only the watermark, which is already its horizon: there is
// nothing to delete.
func (s *StateFile) Prune(ctx context.Context, job, through string) (int64, error) {
	return 0, (Key{Job: job, Period: through}).Validate()
}

// Reset un-parks the job's pending period: Resolve(ctx, key, ResolveRetry).
func (s *StateFile) Reset(ctx context.Context, key Key) error {
	return s.Resolve(ctx, key, ResolveRetry)
}
