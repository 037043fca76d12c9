package idemtest

// The reference model of TestModel: what every key and job of a store must
// be after each operation, in plain Go. It knows nothing of how a store
// keeps its records; it follows the protocol of idem.RunOn, CatchUp,
// Resolve and Prune as their documentation states it, step by step, with
// the crash points a run passes.
//
// Where the expected behaviour is a decision that a known defect broke, the
// model says so in one function named for it: catchUpStart (where a job's
// catch-up starts) and ownLeaseLost (what an attempt that lost its lease by
// its own clock leaves behind).

import (
	"fmt"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemstore"
)

// The model's fixed parameters. Every move of the clock is a whole number
// of minutes, and every deadline (lease, backoff) is half a minute off the
// minute, so a store that keeps time on its own clock (a database's now(),
// moved by Harness.Shift) decides as the model does even though real time
// passes between the operations.
const (
	mLease       = 10*time.Minute + 30*time.Second
	mBackoff     = 30*time.Minute + 30*time.Second
	mMaxAttempts = 3               // the third failure parks a key
	mTick        = 4 * time.Minute // a slow fn's step: more than a third of the lease, so each step renews
)

// mStart is where the model's clock starts; it stays within mSpan of it.
var mStart = time.Date(2026, 11, 2, 10, 0, 0, 0, time.UTC)

const mSpan = 14 * 24 * time.Hour

// mMode is a job's mode.
type mMode int

const (
	modeALO mMode = iota // idem.AtLeastOnce
	modeAMO              // idem.AtMostOnce
	modeTP               // idem.TwoPhase
	modeTx               // RunTx: the business write commits with the done mark
)

func (m mMode) String() string {
	return [...]string{"at-least-once", "at-most-once", "two-phase", "run-tx"}[m]
}

// fnKind is what one call of fn does.
type fnKind int

const (
	fnOK        fnKind = iota // applies its effect, returns nil
	fnFail                    // returns an error, no effect
	fnFailAfter               // applies its effect, then returns an error (a timeout after sending)
	fnNothing                 // returns idem.NothingHappened(err), no effect
	fnPermanent               // returns idem.Permanent(err), no effect
	fnPanic                   // applies its effect, then panics
	fnStall                   // the process stalls past the lease (no renewal), then fn returns idem.CheckLease's error
	fnSlow                    // runs n steps of mTick (the heartbeat renews at each), then CheckLease, effect, nil
)

// mFn is one call of fn.
type mFn struct {
	kind fnKind
	d    time.Duration // fnStall: how long the stall lasts
	n    int           // fnSlow: how many steps
}

// mRec is a record as the model expects it. Times are on the store's
// clock.
type mRec struct {
	status     idem.Status
	attempt    int64
	failures   int
	leaseUntil time.Time // running (ledgers; a state file keeps none)
	notBefore  time.Time // failed after a failed attempt
	revision   int64     // re-runs requested (idem.Rerun): 0 until the first
}

// mFile is a state file's entry for one job: its watermark and pending
// period.
type mFile struct {
	lastDone, pending string
	status            idem.Status // of pending, or done
	attempt           int64       // the job's latest attempt, whichever period
	failures          int
	notBefore         time.Time
}

// mJob is what a store keeps per job.
type mJob struct {
	cursor, horizon string // ledgers
	file            *mFile // watermark stores: nil until first written
	claimed         int64  // watermark stores: the last attempt number claimed (kept beside the file, so never repeated)
}

// mLock is a state file's job lock, held by the attempt in flight.
type mLock struct {
	period  string
	attempt int64
}

// model is the expected state of one store.
type model struct {
	wm    bool // the store keeps a watermark per job (Harness.Watermark)
	lock  bool // a running attempt holds a lock, not a lease that expires (!Harness.LeaseExpiry)
	shift bool // the store keeps its own clock, which a clock moved back does not reach (Harness.Shift)
	fresh bool // RunTx claims, runs and marks a new key in one transaction (idemstore.FreshTxStore)

	now  time.Time // the clock of the Runs
	snow time.Time // the store's clock: now, or for a store on its own clock, only ever moved forward

	recs    map[idem.Key]*mRec // ledgers
	jobs    map[string]*mJob
	locks   map[string]mLock // watermark stores: the job locks of attempts in flight
	effects map[idem.Key]int // how many times fn's effect was applied
	rows    map[idem.Key]int // RunTx: the business writes committed
	modes   map[string]mMode

	hasFails bool // TwoPhase: the downstream check errs (for the current operation)

	// fault is the store fault of the current operation (nil: none): it
	// strikes the first call it names, once.
	fault *mFaultState

	// Re-runs (idem.Rerun): the request ids recorded per key with their
	// revision, the revision an attempt's done mark makes (pending: 0
	// for none), and the effects and business rows of the revisions
	// before the current one (each mode's promise is per revision).
	reruns   map[idem.Key]map[string]int64
	pending  map[idem.Key]int64
	effBase  map[idem.Key]int
	rowsBase map[idem.Key]int

	// how keys were settled, for the promise checks: by an operator
	// (Resolve done or retry), or by a run.
	byOperator map[idem.Key]bool
	byRun      map[idem.Key]bool
}

func newModel(wm, lock, shift, fresh bool, modes map[string]mMode) *model {
	return &model{
		wm: wm, lock: lock, shift: shift, fresh: fresh,
		now: mStart, snow: mStart,
		recs: map[idem.Key]*mRec{}, jobs: map[string]*mJob{}, locks: map[string]mLock{},
		effects: map[idem.Key]int{}, rows: map[idem.Key]int{}, modes: modes,
		byOperator: map[idem.Key]bool{}, byRun: map[idem.Key]bool{},
		reruns: map[idem.Key]map[string]int64{}, pending: map[idem.Key]int64{},
		effBase: map[idem.Key]int{}, rowsBase: map[idem.Key]int{},
	}
}

func (m *model) job(name string) *mJob {
	j := m.jobs[name]
	if j == nil {
		j = &mJob{}
		m.jobs[name] = j
	}
	return j
}

// move makes d pass on the Runs' clock (d < 0: it jumps back).
func (m *model) move(d time.Duration) {
	m.now = m.now.Add(d)
	if d > 0 || !m.shift {
		m.snow = m.snow.Add(d)
	}
}

// day is the name of the day (UTC) containing t: the period of idem.Daily(time.UTC).
func day(t time.Time) string { return t.UTC().Format(time.DateOnly) }

// addDays returns the period n days after p.
func addDays(p string, n int) string {
	t, err := time.Parse(time.DateOnly, p)
	if err != nil {
		panic("idemtest: model period " + p)
	}
	return day(t.AddDate(0, 0, n))
}

// ---- the store: records, claims and their ends ----

// lookup is what Store.Lookup must return for k.
func (m *model) lookup(k idem.Key) (mRec, bool) {
	if m.wm {
		f := m.job(k.Job).file
		switch {
		case f == nil:
			return mRec{}, false
		case k.Period <= f.lastDone:
			r := mRec{status: idem.StatusDone}
			if k.Period == f.lastDone {
				r.attempt = f.attempt // a watermark keeps the job's latest attempt, not the period's
			}
			return r, true
		case k.Period == f.pending:
			return mRec{status: f.status, attempt: f.attempt, failures: f.failures, notBefore: f.notBefore}, true
		}
		return mRec{}, false
	}
	if r, ok := m.recs[k]; ok {
		return *r, true
	}
	if h := m.job(k.Job).horizon; h != "" && k.Period <= h {
		return mRec{status: idem.StatusDone}, true // pruned: done forever
	}
	return mRec{}, false
}

// write applies a change to the store. A state file writes a temp file
// (crash point MidWrite: the change is lost) and renames it (AfterRename:
// the change stands); a ledger's transactions have no point inside.
func (m *model) write(cr *crashState, apply func()) (crashed bool) {
	if !m.wm {
		apply()
		return false
	}
	if cr.hit(idemstore.MidWrite) {
		return true
	}
	apply()
	return cr.hit(idemstore.AfterRename)
}

func (m *model) fileOf(job string) *mFile {
	j := m.job(job)
	if j.file == nil {
		j.file = &mFile{status: idem.StatusDone}
	}
	return j.file
}

// mClaim is what a claim found.
type mClaim struct {
	state    idemstore.ClaimState
	attempt  int64
	doubt    bool
	failures int  // the record's failure count, an abandoned attempt counted
	err      bool // the claim failed: a watermark's other period is pending (ErrOutOfOrder)
	crashed  bool
}

// claim is Store.Claim.
func (m *model) claim(k idem.Key, takeUnknown, durable bool, cr *crashState) mClaim {
	rec, found := m.lookup(k)
	if found && rec.status == idem.StatusDone {
		return mClaim{state: idemstore.ClaimDone}
	}
	if m.lock {
		if _, held := m.locks[k.Job]; held {
			return mClaim{state: idemstore.ClaimBusy}
		}
	}
	if m.wm && !found && m.job(k.Job).file != nil && m.job(k.Job).file.pending != "" {
		return mClaim{err: true} // one pending period per job
	}
	c := mClaim{state: idemstore.ClaimAcquired, failures: rec.failures}
	switch {
	case !found:
	case rec.status == idem.StatusSkipped:
		return mClaim{state: idemstore.ClaimSkipped}
	case rec.status == idem.StatusRunning:
		if m.held(rec) {
			return mClaim{state: idemstore.ClaimBusy}
		}
		// The holder died or stalled (with a lock: nobody holds it).
		c.doubt = true
		c.failures++
	case rec.status == idem.StatusFailed:
		if m.snow.Before(rec.notBefore) {
			return mClaim{state: idemstore.ClaimBackingOff}
		}
	case rec.status == idem.StatusUnknown:
		if !takeUnknown {
			return mClaim{state: idemstore.ClaimUnknown}
		}
		c.doubt = true
	default: // parked
		return mClaim{state: idemstore.ClaimParked}
	}
	if m.wm {
		// A new number, higher than the file's and than every one claimed
		// before: an AtLeastOnce claim writes nothing to the file, but the
		// number it took is kept (in the job's lock file).
		j := m.job(k.Job)
		if j.file != nil {
			c.attempt = j.file.attempt
		}
		c.attempt = max(c.attempt, j.claimed) + 1
		j.claimed = c.attempt
		if durable || c.doubt { // an AtLeastOnce claim of a state file writes nothing
			if m.write(cr, func() {
				f := m.fileOf(k.Job)
				f.pending, f.status, f.attempt, f.failures, f.notBefore = k.Period, idem.StatusRunning, c.attempt, c.failures, time.Time{}
			}) {
				c.crashed = true
				return c
			}
		}
		m.locks[k.Job] = mLock{k.Period, c.attempt}
		return c
	}
	c.attempt = rec.attempt + 1
	m.recs[k] = &mRec{status: idem.StatusRunning, attempt: c.attempt, failures: c.failures, leaseUntil: m.snow.Add(mLease), revision: rec.revision}
	return c
}

// held reports whether the attempt of a running record still holds it.
// With a lock (a state file) only the lock tells, and claim and resolve
// look at it first; a lease holds until it expires. The model's crashes are
// in-process (CrashAt, a panic): the holder's process lives on, so the
// lease it left holds until it expires, whatever a store knows of holders
// whose process is gone (issue 12, defect 4).
func (m *model) held(r mRec) bool { return !m.lock && m.snow.Before(r.leaseUntil) }

// renew is Store.Renew by the heartbeat of attempt.
func (m *model) renew(k idem.Key, attempt int64) {
	if r := m.recs[k]; !m.wm && r != nil && r.attempt == attempt && r.status == idem.StatusRunning {
		r.leaseUntil = m.snow.Add(mLease)
	}
}

// finish is Store.Finish: fenced by the attempt (a state file: by the lock
// this process holds, which it then releases, whatever the write does).
func (m *model) finish(k idem.Key, attempt int64, status idem.Status, failures int, notBefore time.Time, cursor bool, cr *crashState) (lost, crashed bool) {
	if m.wm {
		if l, held := m.locks[k.Job]; !held || l != (mLock{k.Period, attempt}) {
			return true, false
		}
		delete(m.locks, k.Job)
		return false, m.write(cr, func() {
			f := m.fileOf(k.Job)
			f.attempt = attempt
			if status == idem.StatusDone {
				f.status, f.lastDone, f.pending, f.failures, f.notBefore = idem.StatusDone, k.Period, "", 0, time.Time{}
				return
			}
			f.status, f.pending, f.failures, f.notBefore = status, k.Period, failures, notBefore
		})
	}
	r := m.recs[k]
	refused := r == nil || r.attempt != attempt || r.status != idem.StatusRunning
	if ft := m.takeFault(faultFinish); ft != nil && !(ft.after && refused) {
		// The engine tries again after a short wait on the Runs' clock:
		// the second try lands, or (after) finds that the first did; a
		// refused one is refused again. (A refused write has no answer
		// to lose.)
		ft.struck = true
		m.move(mFinishRetry)
	}
	if refused {
		return true, false
	}
	r.status, r.failures, r.notBefore, r.leaseUntil = status, failures, notBefore, time.Time{}
	if status == idem.StatusDone && cursor {
		if j := m.job(k.Job); k.Period > j.cursor {
			j.cursor = k.Period
		}
	}
	m.promote(k)
	return false, false
}

// abandon drops what an attempt that stopped holds (a state file's lock),
// as the kernel does for a process that dies.
func (m *model) abandon(k idem.Key, attempt int64) {
	if l, held := m.locks[k.Job]; held && l == (mLock{k.Period, attempt}) {
		delete(m.locks, k.Job)
	}
}

// resolveErr is how Resolve refused.
type resolveErr int

const (
	resolveOK resolveErr = iota
	resolveNot
	resolveOutOfOrder
)

// resolve is Store.Resolve.
func (m *model) resolve(k idem.Key, to idem.Resolution, cr *crashState) (resolveErr, bool) {
	if m.lock {
		if _, held := m.locks[k.Job]; held {
			return resolveNot, false
		}
	}
	rec, found := m.lookup(k)
	switch {
	case !found && to == idem.ResolveRetry:
		return resolveNot, false // runnable already
	case found && rec.status == idem.StatusDone:
		return resolveNot, false
	case found && rec.status == idem.StatusRunning && m.held(rec):
		return resolveNot, false // a live attempt holds it
	}
	status := map[idem.Resolution]idem.Status{idem.ResolveDone: idem.StatusDone, idem.ResolveRetry: idem.StatusFailed, idem.ResolveSkip: idem.StatusSkipped}[to]
	if m.wm {
		if f := m.job(k.Job).file; f != nil && f.pending != "" && f.pending != k.Period {
			return resolveOutOfOrder, false
		}
		return resolveOK, m.write(cr, func() {
			f := m.fileOf(k.Job)
			f.failures, f.notBefore = 0, time.Time{}
			if status == idem.StatusFailed {
				f.status = idem.StatusFailed
				return
			}
			f.status, f.lastDone, f.pending = idem.StatusDone, k.Period, "" // a watermark cannot tell done from skipped
		})
	}
	r := m.recs[k]
	if r == nil {
		r = &mRec{}
		m.recs[k] = r
	}
	r.status, r.failures, r.notBefore, r.leaseUntil = status, 0, time.Time{}, time.Time{}
	m.promote(k)
	return resolveOK, false
}

// prune is CatchUpStore.Prune: deleted, or refused.
func (m *model) prune(job, through string) (int64, bool) {
	if m.wm {
		return 0, false // a watermark keeps no per-period records
	}
	j := m.job(job)
	if j.cursor != "" && through > j.cursor {
		return 0, true
	}
	var del []idem.Key
	for k, r := range m.recs {
		if k.Job != job || k.Period > through {
			continue
		}
		if r.status != idem.StatusDone && r.status != idem.StatusSkipped {
			return 0, true
		}
		del = append(del, k)
	}
	for _, k := range del {
		delete(m.recs, k)
		delete(m.reruns, k) // its history is gone, its re-run requests too
		delete(m.pending, k)
	}
	if through > j.horizon {
		j.horizon = through
	}
	return int64(len(del)), false
}

// jobState is CatchUpStore.Job: a watermark is both cursor and horizon.
func (m *model) jobState(job string) (cursor, horizon string) {
	j := m.job(job)
	if m.wm {
		if j.file == nil {
			return "", ""
		}
		return j.file.lastDone, j.file.lastDone
	}
	return j.cursor, j.horizon
}

// advance is CatchUpStore.Advance; false if refused (a watermark moves only
// with done marks).
func (m *model) advance(job, period string) bool {
	if m.wm {
		c, _ := m.jobState(job)
		return period <= c
	}
	if j := m.job(job); period > j.cursor {
		j.cursor = period
	}
	return true
}

// ---- Run ----

// mResult is how a Run ended.
type mResult struct {
	outcome  idem.Outcome
	crashed  bool // a crash point stopped it (ErrCrashed)
	panicked bool // fn panicked
}

func (r mResult) ok() bool {
	return !r.crashed && !r.panicked && (r.outcome == idem.Ran || r.outcome == idem.AlreadyDone ||
		r.outcome == idem.Recovered || r.outcome == idem.Skipped)
}

var crashed = mResult{outcome: idem.Failed, crashed: true}

// mFlight is an attempt that holds its key and is about to call fn.
type mFlight struct {
	key         idem.Key
	mode        mMode
	attempt     int64
	failures    int
	cursor      bool
	leaseClient time.Time // the lease's end as the attempt's own process sees it (CheckLease)
}

// run is one call of idem.RunOn with idem.OneAttempt: next gives what
// fn does when it is called.
func (m *model) run(k idem.Key, next func() mFn, cr *crashState, cursor bool) mResult {
	if m.modes[k.Job] == modeTx {
		return m.runTx(k, next, cr, cursor)
	}
	if cr.hit(idemstore.BeforeClaim) {
		return crashed
	}
	r, f := m.begin(k, cr, cursor)
	if f == nil {
		return r
	}
	return m.call(f, next(), cr)
}

// begin claims k (past the point BeforeClaim) and settles an earlier
// attempt in doubt; it returns the attempt if fn is to be called, or else
// how the run ended.
func (m *model) begin(k idem.Key, cr *crashState, cursor bool) (mResult, *mFlight) {
	mode := m.modes[k.Job]
	if ft := m.takeFault(faultClaim); ft != nil {
		// The claim failed: nothing written (before), or written and
		// its answer lost (after). Either way the run fails with the
		// store's error; an attempt the claim took is abandoned, and
		// found by a later claim once its lease ends.
		ft.struck = true
		if ft.after {
			m.claim(k, mode == modeTP, mode == modeAMO || mode == modeTP, cr)
		}
		return mResult{outcome: idem.Failed}, nil
	}
	c := m.claim(k, mode == modeTP, mode == modeAMO || mode == modeTP, cr)
	switch {
	case c.crashed:
		return crashed, nil
	case c.err:
		return mResult{outcome: idem.Failed}, nil
	}
	switch c.state {
	case idemstore.ClaimDone:
		return mResult{outcome: idem.AlreadyDone}, nil
	case idemstore.ClaimSkipped:
		return mResult{outcome: idem.Skipped}, nil
	case idemstore.ClaimBusy:
		return mResult{outcome: idem.InProgress}, nil
	case idemstore.ClaimBackingOff:
		return mResult{outcome: idem.BackingOff}, nil
	case idemstore.ClaimUnknown:
		return mResult{outcome: idem.Unknown}, nil
	case idemstore.ClaimParked:
		return mResult{outcome: idem.Parked}, nil
	}
	f := &mFlight{key: k, mode: mode, attempt: c.attempt, failures: c.failures, cursor: cursor, leaseClient: m.now.Add(mLease)}
	if cr.hit(idemstore.AfterClaim) {
		m.abandon(k, f.attempt)
		return crashed, nil
	}
	if c.doubt {
		if r, done := m.settleDoubt(f, c.failures, cr); done {
			return r, nil
		}
	}
	return mResult{}, f
}

// call calls fn (what b does) for the attempt, and ends the attempt.
func (m *model) call(f *mFlight, b mFn, cr *crashState) mResult {
	k := f.key
	switch b.kind {
	case fnPanic:
		m.effects[k]++
		m.abandon(k, f.attempt)
		return mResult{outcome: idem.Failed, panicked: true}
	case fnStall:
		m.move(b.d)
		if !m.now.Before(f.leaseClient) {
			return m.ownLeaseLost(f, cr)
		}
		return m.done(f, cr) // CheckLease said nil: fn returned nil without an effect
	case fnSlow:
		for range b.n {
			m.move(mTick)
			m.renew(k, f.attempt)
			f.leaseClient = m.now.Add(mLease)
		}
		m.effects[k]++
		return m.done(f, cr)
	case fnOK:
		m.effects[k]++
		return m.done(f, cr)
	case fnFailAfter:
		m.effects[k]++
	}
	return m.failed(f, b.kind, cr)
}

// done ends an attempt whose fn returned nil.
func (m *model) done(f *mFlight, cr *crashState) mResult {
	if cr.hit(idemstore.AfterFn) {
		m.abandon(f.key, f.attempt)
		return crashed
	}
	lost, c := m.finish(f.key, f.attempt, idem.StatusDone, 0, time.Time{}, f.cursor, cr)
	switch {
	case c:
		return crashed
	case lost:
		return mResult{outcome: idem.LeaseLost}
	case cr.hit(idemstore.AfterDone):
		return crashed
	}
	m.byRun[f.key] = true
	return mResult{outcome: idem.Ran}
}

// failed ends an attempt whose fn returned an error.
func (m *model) failed(f *mFlight, kind fnKind, cr *crashState) mResult {
	failures := f.failures + 1
	if kind == fnPermanent {
		return m.park(f, failures, cr)
	}
	if kind != fnNothing { // it may have had its effect: ask the mode
		if r, done := m.settleDoubt(f, failures, cr); done {
			return r
		}
	}
	if failures >= mMaxAttempts {
		return m.park(f, failures, cr)
	}
	lost, c := m.finish(f.key, f.attempt, idem.StatusFailed, failures, m.snow.Add(mBackoff), false, cr)
	switch {
	case c:
		return crashed
	case lost:
		return mResult{outcome: idem.LeaseLost}
	}
	return mResult{outcome: idem.BackingOff}
}

// settleDoubt asks the mode about an attempt that may have had its
// effect; done is false when fn is to run (again).
func (m *model) settleDoubt(f *mFlight, failures int, cr *crashState) (r mResult, done bool) {
	verdict := idem.StatusFailed // run again
	switch f.mode {
	case modeAMO:
		verdict = idem.StatusUnknown
	case modeTP:
		switch {
		case m.hasFails:
			verdict = idem.StatusUnknown
		case m.effects[f.key] > m.effBase[f.key]: // the revision's
			verdict = idem.StatusDone
		}
	}
	switch verdict {
	case idem.StatusDone:
		lost, c := m.finish(f.key, f.attempt, idem.StatusDone, 0, time.Time{}, f.cursor, cr)
		switch {
		case c:
			return crashed, true
		case lost:
			return mResult{outcome: idem.LeaseLost}, true
		case cr.hit(idemstore.AfterDone):
			return crashed, true
		}
		m.byRun[f.key] = true
		return mResult{outcome: idem.Recovered}, true
	case idem.StatusUnknown:
		lost, c := m.finish(f.key, f.attempt, idem.StatusUnknown, failures, time.Time{}, false, cr)
		switch {
		case c:
			return crashed, true
		case lost:
			return mResult{outcome: idem.LeaseLost}, true
		}
		return mResult{outcome: idem.Unknown}, true
	}
	if failures >= mMaxAttempts {
		return m.park(f, failures, cr), true
	}
	return mResult{}, false
}

func (m *model) park(f *mFlight, failures int, cr *crashState) mResult {
	lost, c := m.finish(f.key, f.attempt, idem.StatusParked, failures, time.Time{}, false, cr)
	switch {
	case c:
		return crashed
	case lost:
		return mResult{outcome: idem.LeaseLost}
	}
	return mResult{outcome: idem.Parked}
}

// ownLeaseLost is what an attempt leaves when fn returns the ErrLeaseLost
// of idem.CheckLease: its process stalled past the lease and nobody took
// the key over. Issue 12, defect 2: the attempt is an ordinary failure that
// may have had its effect — its end is recorded by the mode through the
// fenced Finish (AtLeastOnce: failed and backing off; AtMostOnce: unknown;
// TwoPhase: has is asked) — and it holds nothing afterwards: a state file's
// job lock is released. (The defect: the state file kept the lock, and
// every later trigger said in_progress.)
func (m *model) ownLeaseLost(f *mFlight, cr *crashState) mResult {
	return m.failed(f, fnFail, cr)
}

// resume ends an attempt that was held inside fn (an overlap's first
// trigger): fn calls CheckLease unless noCheck, then applies its effect and
// returns nil.
func (m *model) resume(f *mFlight, noCheck bool) mResult {
	if !noCheck && !m.now.Before(f.leaseClient) {
		return m.ownLeaseLost(f, nil) // the overlap's first trigger crashes nowhere
	}
	m.effects[f.key]++
	return m.done(f, nil)
}

// runTx is one call of idem.RunTx: fn's business write commits with
// the done mark (and, for CatchUpTx, the cursor), or not at all; the mode
// is AtLeastOnce.
func (m *model) runTx(k idem.Key, next func() mFn, cr *crashState, cursor bool) mResult {
	if cr.hit(idemstore.BeforeClaim) {
		return crashed
	}
	if _, found := m.lookup(k); m.fresh && !found {
		// A new key: claimed, run and marked done in one transaction.
		if cr.hit(idemstore.AfterClaim) {
			return crashed // rolled back: no record
		}
		b := next()
		switch b.kind {
		case fnPanic:
			return mResult{outcome: idem.Failed, panicked: true} // rolled back: no record
		case fnOK, fnStall, fnSlow:
			if cr.hit(idemstore.AfterFn) {
				return crashed
			}
			if ft := m.takeFault(faultCommit); ft != nil && !ft.after {
				ft.struck = true
				// Killed before the commit: nothing committed; the run
				// was attempt 1, and the usual claim records its failure.
				m.recs[k] = &mRec{status: idem.StatusRunning, attempt: 1, leaseUntil: m.snow.Add(mLease)}
				return m.failedTx(&mFlight{key: k, mode: modeTx, attempt: 1, cursor: cursor}, fnNothing, cr)
			} else if ft != nil {
				ft.struck = true
				// Committed, its answer lost: the usual claim that follows
				// finds the key done.
				m.recs[k] = &mRec{status: idem.StatusDone, attempt: 1}
				m.rows[k]++
				m.byRun[k] = true
				return mResult{outcome: idem.AlreadyDone}
			}
			m.recs[k] = &mRec{status: idem.StatusDone, attempt: 1}
			if j := m.job(k.Job); cursor && k.Period > j.cursor {
				j.cursor = k.Period
			}
			m.rows[k]++
			m.byRun[k] = true
			if cr.hit(idemstore.AfterDone) {
				return crashed
			}
			return mResult{outcome: idem.Ran}
		}
		// fn failed: its writes are rolled back, the claim is committed.
		m.recs[k] = &mRec{status: idem.StatusRunning, attempt: 1, leaseUntil: m.snow.Add(mLease)}
		return m.failedTx(&mFlight{key: k, mode: modeTx, attempt: 1, cursor: cursor}, b.kind, cr)
	}
	r, f := m.begin(k, cr, cursor)
	if f == nil {
		return r
	}
	b := next()
	switch b.kind {
	case fnPanic:
		return mResult{outcome: idem.Failed, panicked: true} // rolled back; the claim stands
	case fnOK, fnStall, fnSlow:
		if cr.hit(idemstore.AfterFn) {
			return crashed // rolled back; the claim stands
		}
		ft := m.takeFault(faultCommit)
		if ft != nil {
			ft.struck = true
		}
		if ft != nil && !ft.after {
			return m.failedTx(f, fnNothing, cr) // killed before the commit: rolled back
		}
		rev := m.recs[k].revision
		if lost, _ := m.finish(k, f.attempt, idem.StatusDone, 0, time.Time{}, cursor, cr); lost {
			return mResult{outcome: idem.LeaseLost}
		}
		if ft != nil {
			r := m.lostCommit(k)
			m.committed(k, rev)
			return r
		}
		m.rows[k]++
		m.committed(k, rev)
		m.byRun[k] = true
		if cr.hit(idemstore.AfterDone) {
			return crashed
		}
		return mResult{outcome: idem.Ran}
	}
	return m.failedTx(f, b.kind, cr)
}

// lostCommit is the end of a RunTx whose transaction committed (fn's
// write and the done mark) and whose answer was lost: the engine reads the
// key's record, finds it done by this attempt, and reports the run done.
// (Before, it recorded the commit's error as a failure that left nothing
// behind; that record was refused, the key being done, and the run ended
// with ErrLeaseLost: exactly once held, but the caller was told it failed.)
func (m *model) lostCommit(k idem.Key) mResult {
	m.rows[k]++
	m.byRun[k] = true
	return mResult{outcome: idem.Ran}
}

// committed notes that the business write of k just counted was of
// revision rev: if the done mark made a new revision (a re-run request
// waited for it), that write is the earlier revision's.
func (m *model) committed(k idem.Key, rev int64) {
	if r := m.recs[k]; r != nil && r.revision != rev {
		m.rowsBase[k] = m.rows[k]
	}
}

// failedTx: a rolled-back transaction left nothing behind, whatever fn
// returned (idem.NothingHappened); only Permanent parks at once.
func (m *model) failedTx(f *mFlight, kind fnKind, cr *crashState) mResult {
	if kind == fnPermanent {
		return m.park(f, f.failures+1, cr)
	}
	return m.failed(f, fnNothing, cr)
}

// ---- CatchUp ----

// mPeriod is what catch-up did with one period.
type mPeriod struct {
	period  string
	outcome idem.Outcome
	err     bool
	crashed bool
}

// mCatchUpResult is how a CatchUp ended.
type mCatchUpResult struct {
	periods  []mPeriod
	deferred int
	reruns   int // the first periods: re-runs behind the cursor
	cursor   string
	err      bool
	panicked bool
}

// catchUpOp is a CatchUp call: the job, its policy, and what the calls of fn
// do, in order (fnOK after the list).
type catchUpOp struct {
	job       string
	latest    bool
	max       int    // CatchUpAll(max); -1: no policy option (the default, DefaultMaxPeriods)
	keepGoing bool   // ContinueAfterFailure
	since     string // Since(the start of this day); "" for none
}

// catchUpStart records where a job's catch-up starts, on the first call
// for a job with no cursor, before any period runs (CatchUpStore.Start):
// the period before the first (Since's, or else the latest due one)
// becomes the job's cursor, so that a first period that fails is where
// every later call starts, and the periods after it wait for it. A state
// file's cursor is its watermark: it is written only for a job that has no
// entry at all (with a pending period and no watermark, nothing is
// recorded and catch-up waits for that period); and it is refused while
// an attempt holds the job's lock. It returns the job's cursor afterwards,
// and whether it was refused or crashed. EXPECTED (issue 12, defect 1
// fixed; before the fix, every call of a job with no cursor started at the
// latest due period of its own time, silently leaving a failed first
// period and the ones after it behind).
func (m *model) catchUpStart(job, before string, cr *crashState) (cursor string, refused, crashed bool) {
	if m.wm {
		if _, held := m.locks[job]; held {
			return "", true, false
		}
		if m.job(job).file != nil {
			c, _ := m.jobState(job)
			return c, false, false
		}
		return before, false, m.write(cr, func() { m.job(job).file = &mFile{lastDone: before, status: idem.StatusDone} })
	}
	if j := m.job(job); j.cursor == "" {
		j.cursor = before
	}
	return m.job(job).cursor, false, false
}

// catchUp is idem.CatchUp (CatchUpTx for a RunTx job) over
// idem.Daily(time.UTC), periods due at their end.
func (m *model) catchUp(op catchUpOp, next func() mFn, cr *crashState) mCatchUpResult {
	cursor, horizon := m.jobState(op.job)
	var res mCatchUpResult
	last := addDays(day(m.now), -1)
	first := last
	if op.since != "" {
		first = op.since
	}
	if cursor == "" {
		var refused, c bool
		if cursor, refused, c = m.catchUpStart(op.job, addDays(first, -1), cr); refused || c {
			res.err = true
			return res
		}
	}
	res.cursor = cursor
	// Periods behind the cursor that a re-run request made runnable run
	// first, once each, without moving the cursor; one that fails waits
	// for the next call and holds up nothing.
	reruns := 0
	if cursor != "" {
		for _, p := range m.rerunsDue(op.job, cursor) {
			r := m.run(idem.Key{Job: op.job, Period: p}, next, cr, false)
			if r.panicked {
				res.panicked = true
				return res
			}
			res.periods = append(res.periods, mPeriod{period: p, outcome: r.outcome, err: !r.ok(), crashed: r.crashed})
			reruns++
			res.reruns = reruns
		}
	}
	if cursor != "" {
		first = addDays(cursor, 1)
	}
	for horizon != "" && first <= horizon && first <= last {
		first = addDays(first, 1)
	}
	if first > last {
		return res
	}
	due := 0
	for p := first; p <= last; p = addDays(p, 1) {
		due++
	}
	max := op.max
	if max < 0 {
		max = idem.DefaultMaxPeriods
	}
	unbroken := true
	for p := first; p <= last; p = addDays(p, 1) {
		if (!op.latest && max > 0 && len(res.periods)-reruns >= max) || (res.err && !op.keepGoing) {
			break
		}
		k := idem.Key{Job: op.job, Period: p}
		var pr mPeriod
		if op.latest && p != last {
			pr = m.skip(k, cr)
		} else {
			r := m.run(k, next, cr, unbroken)
			if r.panicked {
				res.panicked = true
				return res
			}
			pr = mPeriod{period: p, outcome: r.outcome, err: !r.ok(), crashed: r.crashed}
		}
		if pr.err {
			unbroken, res.err = false, true
		} else if unbroken && pr.outcome != idem.Ran && pr.outcome != idem.Recovered {
			if !m.advance(op.job, p) {
				unbroken, res.err = false, true
			}
		}
		if unbroken {
			res.cursor = p
		}
		res.periods = append(res.periods, pr)
	}
	res.deferred = due - (len(res.periods) - reruns)
	return res
}

// skip is CatchUpLatest's settling of an older period as skipped.
func (m *model) skip(k idem.Key, cr *crashState) mPeriod {
	pr := mPeriod{period: k.Period}
	rec, found := m.lookup(k)
	switch {
	case found && rec.status == idem.StatusDone:
		pr.outcome = idem.AlreadyDone
		return pr
	case found && rec.status == idem.StatusSkipped:
		pr.outcome = idem.Skipped
		return pr
	case found && rec.status == idem.StatusUnknown:
		pr.outcome, pr.err = idem.Unknown, true
		return pr
	case found && rec.status == idem.StatusParked:
		pr.outcome, pr.err = idem.Parked, true
		return pr
	}
	e, c := m.resolve(k, idem.ResolveSkip, cr)
	switch {
	case c:
		pr.outcome, pr.err, pr.crashed = idem.Failed, true, true
	case e == resolveNot:
		pr.outcome, pr.err = idem.InProgress, true
	case e != resolveOK:
		pr.outcome, pr.err = idem.Failed, true
	default:
		pr.outcome = idem.Skipped
	}
	return pr
}

// ---- what the store must show ----

// records is what Lister.List must return, by key: a ledger's records; a
// state file's one record per job (its pending period, or else its last
// done period).
func (m *model) records() map[idem.Key]mRec {
	out := map[idem.Key]mRec{}
	if m.wm {
		for name, j := range m.jobs {
			if f := j.file; f != nil {
				p := f.pending
				if p == "" {
					p = f.lastDone
				}
				k := idem.Key{Job: name, Period: p}
				out[k], _ = m.lookup(k)
			}
		}
		return out
	}
	for k, r := range m.recs {
		out[k] = *r
	}
	return out
}

// ---- store faults ----

// mFinishRetry is how long the engine waits, on the Runs' clock, before
// it tries a failed Store.Finish again (its first retry delay).
const mFinishRetry = 50 * time.Millisecond

// The calls a fault can strike.
const (
	faultClaim  = "Claim"  // Store.Claim of a Run
	faultFinish = "Finish" // the first Store.Finish of a Run (its done mark or failure record)
	faultCommit = "commit" // the commit of RunTx's transaction, after fn
)

// mFault is a store fault of one trigger: the first call of method fails,
// either before it reaches the store (nothing written: an error of a
// moment, a connection killed), or after the store applied it (its answer
// lost).
type mFault struct {
	method string // faultClaim, faultFinish or faultCommit; "" for none
	after  bool
}

func (f mFault) String() string {
	if f.method == "" {
		return ""
	}
	if f.after {
		return fmt.Sprintf(" fault=%s-applied-reply-lost", f.method)
	}
	return fmt.Sprintf(" fault=%s-fails-before-the-store", f.method)
}

// mFaultState is the fault of the operation the model runs.
type mFaultState struct {
	mFault
	used   bool // the call it strikes was made
	struck bool // and it failed
}

// takeFault returns the operation's fault if it strikes a call of method
// (the first one), and notes that it did.
func (m *model) takeFault(method string) *mFaultState {
	if f := m.fault; f != nil && !f.used && f.method == method {
		f.used = true
		return f
	}
	return nil
}

// clone returns a copy of m that shares nothing it changes: the model of
// an operation's other branch (a fault that did not strike).
func (m *model) clone() *model {
	c := *m
	c.recs = make(map[idem.Key]*mRec, len(m.recs))
	for k, r := range m.recs {
		r := *r
		c.recs[k] = &r
	}
	c.jobs = make(map[string]*mJob, len(m.jobs))
	for n, j := range m.jobs {
		j := *j
		if j.file != nil {
			f := *j.file
			j.file = &f
		}
		c.jobs[n] = &j
	}
	c.locks = cloneMap(m.locks)
	c.effects = cloneMap(m.effects)
	c.rows = cloneMap(m.rows)
	c.byOperator = cloneMap(m.byOperator)
	c.byRun = cloneMap(m.byRun)
	c.reruns = make(map[idem.Key]map[string]int64, len(m.reruns))
	for k, ids := range m.reruns {
		c.reruns[k] = cloneMap(ids)
	}
	c.pending = cloneMap(m.pending)
	c.effBase = cloneMap(m.effBase)
	c.rowsBase = cloneMap(m.rowsBase)
	c.fault = nil
	return &c
}

func cloneMap[K comparable, V any](m map[K]V) map[K]V {
	out := make(map[K]V, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// crashState counts the crash points a run passes: the nth time it
// reaches point, it crashes (once).
type crashState struct {
	spec  mCrash
	count int
	done  bool
}

// mCrash is where an operation crashes: at the nth time it reaches point
// (any key). A zero point: nowhere.
type mCrash struct {
	point idemstore.Point
	nth   int
}

func newCrash(s mCrash) *crashState { return &crashState{spec: s} }

func (c *crashState) hit(p idemstore.Point) bool {
	if c == nil || c.done || c.spec.point == "" || p != c.spec.point {
		return false
	}
	c.count++
	if c.count == c.spec.nth {
		c.done = true
		return true
	}
	return false
}
