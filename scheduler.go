package idem

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/idemgo/idem/idemstore"
	"github.com/idemgo/idem/internal/holder"
)

// Recheck is the longest a [Scheduler] waits before it reads the wall
// clock again. Its timers are monotonic and do not advance while the
// machine is suspended, so a wake-up or a clock step is noticed within
// Recheck at most.
const Recheck = time.Minute

// DefaultMaxRunning is how many jobs a Scheduler runs at once unless
// [WithMaxRunning] says otherwise.
const DefaultMaxRunning = 8

// ErrSchedulerClosed is returned by [Scheduler.Run] after [Scheduler.Shutdown],
// and by Add, AddTx and a second Run on a scheduler that has run.
var ErrSchedulerClosed = errors.New("idem: scheduler closed")

type schedulerConfig struct {
	defaults   []Option // every job's defaults, before its own options
	probe      config   // the defaults applied: the scheduler's clock and logger
	maxRunning int
}

// WithMaxRunning caps how many jobs of a Scheduler run at once (default
// [DefaultMaxRunning]): a job that is due while n others run waits for one
// of them to end, its Status showing why. Size it from the store's
// connection budget: a running job holds a connection for each of its
// writes, and its lease renewals. An n below 1 is an error matching
// [ErrInvalidOption].
func WithMaxRunning(n int) Option {
	return &option{name: "WithMaxRunning", class: classScheduler, sched: func(c *schedulerConfig) error {
		if n < 1 {
			return invalidOption("WithMaxRunning(%d): at least one job must be able to run", n)
		}
		c.maxRunning = n
		return nil
	}}
}



// jobConfig is what a Scheduler needs of a job besides the catch-up's
// config.
type jobConfig struct {
	jitter      time.Duration
	overlapping bool
	tolerance   time.Duration
}

// WithJitter delays each due run of the job by a random duration in [0, d),
// so that the replicas of a service, which all run the same jobs, do not
// reach the store at the same instant. A negative d is an error matching
// [ErrInvalidOption].
func WithJitter(d time.Duration) Option {
	return newOption("WithJitter", classJob, func(c *config) error {
		if d < 0 {
			return invalidOption("WithJitter(%v): the jitter must not be negative", d)
		}
		c.job.jitter = d
		return nil
	})
}

// RunOverlapping lets a period that becomes due while the job's earlier
// periods still run start at once, as a Run of its own key, alongside
// them. By default the job waits: its periods run one after the other, in
// order, each once the one before it has ended.
func RunOverlapping() Option {
	return newOption("RunOverlapping", classJob, func(c *config) error { c.job.overlapping = true; return nil })
}

// WithLagTolerance makes the job unready ([SchedulerStatus.Ready]) once a
// due period has waited longer than d without being settled. The lag is
// measured at every read of the status, from the due time of the oldest
// period after the job's cursor as the Scheduler last read it: it grows
// while the store fails, while a claim waits for a lock and while fn
// hangs, not only once a catch-up returns. By default lag does not make a
// job unready. A d of zero or less is an error matching
// [ErrInvalidOption].
func WithLagTolerance(d time.Duration) Option {
	return newOption("WithLagTolerance", classJob, func(c *config) error {
		if d <= 0 {
			return invalidOption("WithLagTolerance(%v): the tolerance must be positive", d)
		}
		c.job.tolerance = d
		return nil
	})
}

// A Scheduler runs jobs on their schedules inside a long-running process,
// a service: each job's periods become due as time passes, and the
// Scheduler runs each due period through [CatchUp] (or [CatchUpTx]), so a
// period is done once per store, however many replicas of the service run
// the same Scheduler, and the periods missed while the service was down,
// suspended or slow run afterwards, in order. There is no leader and no
// state in memory that matters: every replica tries, the store's claims let
// one run each period, and a replica that starts reads where each job
// stands from the store.
//
//	s := idem.NewScheduler(ledger)
//	err := s.Add("settle", idem.Daily(shanghai), settle)
//	go s.Run(ctx)
//	defer s.Shutdown(context.Background())
//
// When: a period is due when it ends (with [DueAtStart], when it starts).
// All jobs share one timer, set for the earliest due time; the Scheduler
// also reads the wall clock at least every [Recheck], because monotonic
// timers stand still while the machine is suspended. A wall clock that
// jumps forward makes the periods in between due: they run under the job's
// catch-up policy and caps ([CatchUpAll], [CatchUpLatest],
// [CatchUpWindow]). One that jumps back runs nothing again: the job's
// cursor in the store is past those periods.
//
// Guards ([WithGuard], as a job's option or the Scheduler's default) are
// asked before each period's claim. One that refuses defers the job: nothing
// is claimed or counted as a failure, [JobStatus].Deferred says why, and
// the Scheduler looks at the job again at the next [Recheck], not at once.
//
// A period another replica holds (ErrInProgress) is looked at again when
// the holder's lease ends, as the store reported it (without a report: a
// lease after the look), so that if that replica died or stalled its
// period is taken over then. When the holder is a process of this host
// whose death [idemstore.HolderGone] can prove (the same host name, boot
// and namespaces, on Linux), the Scheduler also checks every second (at
// most every third of the job's lease), without asking the store, whether
// that process still lives, and takes the period over at the first check
// that finds it gone. A holder on another host gets no such check: only
// its lease's end tells. A failed period is retried when its backoff allows; a parked or
// unknown one stops the job's catch-up until a person settles it, and makes
// the Scheduler unready ([Scheduler.Handler]).
//
// The zero Scheduler is not usable; call NewScheduler. Its methods are safe
// for concurrent use.
//
// It does NOT promise that a period starts at its due time: a replica
// that is down, a full [WithMaxRunning], a job's jitter or its earlier
// periods delay it; nor, in [AtLeastOnce], that fn runs once (see the
// modes).
type Scheduler struct {
	store    idemstore.CatchUpStore
	cfg      schedulerConfig
	clock    Clock
	logger   *slog.Logger
	randInt  func(n int64) int64 // the jitter's randomness (a seam for tests)
	checks   []runCheck          // asked before each run
	kick     chan struct{}       // wakes the loop
	finished chan struct{}       // closed when Run has returned

	mu       sync.Mutex
	jobs     []*schedJob // in the order of Add
	byName   map[string]*schedJob
	due      jobHeap     // jobs waiting for their wake time
	ready    []*schedJob // jobs due, waiting for a run check (a slot)
	running  int         // runs in flight
	runs     sync.WaitGroup
	state    int       // schedIdle, schedRunning, schedStopping, schedStopped
	checked  time.Time // the wall time the loop last looked at
	hardStop context.CancelCauseFunc
	relayState
}

const (
	schedIdle = iota
	schedRunning
	schedStopping
	schedStopped
)

// A runCheck is asked, under the Scheduler's lock, before a due job runs:
// it returns "" to let it run, or why it must wait; then the job waits for
// the next change (a run ending, the next wake).
type runCheck func(j *schedJob) (reason string)

// schedJob is one job of a Scheduler and what the Scheduler knows of it.
type schedJob struct {
	name  string
	sched Schedule
	cfg   *config
	run   func(ctx context.Context, key Key, p Period, cfg *config) error

	index    int       // in the due heap; -1 when not in it
	wake     time.Time // when to look at the job next
	queued   bool      // in the ready list
	catching bool      // a catch-up runs
	covered  string    // the latest period a catch-up or overlapping run has taken on
	extra    int       // overlapping single-period runs in flight
	st       JobStatus // what Status reports
	cursor   string    // the job's cursor as a catch-up last read or moved it ("": not read yet)
	since    time.Time // the job's first look: where its lag counts from until its cursor is read
	// A period another replica holds whose holder is a process of this
	// host (ErrInProgress): while its lease lasts, and until the job's
	// next due time (slot), the Scheduler checks every holderProbe whether
	// the holder's process still lives, without asking the store.
	holder      string
	holderUntil time.Time
	slot        time.Time
}

// holderProbe is how often a Scheduler checks whether the holder of a
// period, a process of this host, still lives (at most a third of the
// job's lease).
const holderProbe = time.Second

// NewScheduler returns a Scheduler whose jobs keep their periods in store.
// opts are the Scheduler's: [WithMaxRunning], and [Option]s, which are the
// defaults of every job (a job's own options override them); WithClock and
// WithLogger also set the Scheduler's own clock and logger. An invalid
// option makes Add return its error.
//
// NewScheduler panics if store is nil.
func NewScheduler(store idemstore.CatchUpStore, opts ...Option) *Scheduler {
	if store == nil {
		panic("idem: NewScheduler needs a store")
	}
	s := &Scheduler{
		store:    store,
		cfg:      schedulerConfig{maxRunning: DefaultMaxRunning, probe: *newConfig(store, callScheduler)},
		randInt:  rand.Int64N,
		kick:     make(chan struct{}, 1),
		finished: make(chan struct{}),
		byName:   map[string]*schedJob{},
	}
	for i, o := range opts {
		switch {
		case o == nil:
			s.cfg.probe.keep(invalidOption("NewScheduler: option %d of %d is nil", i+1, len(opts)))
		case !callScheduler.fits(o.option()):
			s.cfg.probe.keep(callScheduler.misfit(o.option()))
		case o.option().sched != nil:
			s.cfg.probe.keep(o.option().sched(&s.cfg))
		default: // an option of every call: a default of every job
			s.cfg.defaults = append(s.cfg.defaults, o)
			s.cfg.probe.keep(o.option().apply(&s.cfg.probe))
		}
	}
	s.clock, s.logger = s.cfg.probe.clock, s.cfg.probe.logger
	s.checks = append(s.checks, s.slotCheck)
	return s
}

// Add registers the job named job: fn runs once for each period of sched,
// as in [CatchUp], with opts (and the Scheduler's defaults). Jobs may be
// added before Run or while it runs.
//
// An invalid job name, option or schedule, or a name added twice, is an
// error (ErrInvalidOption for options; the job is not added). fn must not
// be nil.
func (s *Scheduler) Add(job string, sched Schedule, fn func(ctx context.Context, p Period) error, opts ...Option) error {
	if fn == nil || sched == nil {
		panic("idem: Scheduler.Add needs a schedule and a fn")
	}
	cfg := jobConfigOf(s, callJob, opts)
	return s.add(job, sched, cfg, func(ctx context.Context, key Key, p Period, cfg *config) error {
		return execute(withJobObserver(ctx, cfg), s.store, key, cfg, noValue(func(ctx context.Context) error { return fn(ctx, p) }), nil, nil)
	})
}

// AddTx registers a transactional job, as [Scheduler.Add] does a plain
// one: each period runs through [CatchUpTx], and fn's writes, the period's
// done mark and the job's cursor commit in one transaction of the store's
// database. The Scheduler's store must be an
// [idemstore.CatchUpTxStore] of Tx (a Ledger's is *sql.Tx); otherwise AddTx
// returns an error and adds nothing.
func AddTx[Tx any](s *Scheduler, job string, sched Schedule, fn func(ctx context.Context, tx Tx, p Period) error, opts ...Option) error {
	if fn == nil || sched == nil {
		panic("idem: AddTx needs a schedule and a fn")
	}
	ts, ok := s.store.(idemstore.CatchUpTxStore[Tx])
	if !ok {
		var tx Tx
		return fmt.Errorf("idem: AddTx %s: the scheduler's store %T has no transactions of type %T", job, s.store, tx)
	}
	cfg := jobConfigOf(s, callJobTx, opts)
	return s.add(job, sched, cfg, func(ctx context.Context, key Key, p Period, cfg *config) error {
		return runTx(withJobObserver(ctx, cfg), ts, key, func(ctx context.Context, tx Tx) ([]byte, error) { return nil, fn(ctx, tx, p) }, cfg)
	})
}

// jobConfigOf is a job's config: the engine's and the store's defaults, the
// Scheduler's, then the job's opts.
func jobConfigOf(s *Scheduler, cl call, opts []Option) *config {
	c := newConfig(s.store, cl)
	c.err = s.cfg.probe.err
	base := c.observer // the store's defaults
	c.observer = nil
	for _, o := range s.cfg.defaults {
		c.keep(o.option().apply(c))
	}
	applyOptions(c, cl, opts)
	c.jobObserver = c.observer
	c.observer = chainObservers(base, c.observer)
	return c
}

func (s *Scheduler) add(job string, sched Schedule, cfg *config, run func(context.Context, Key, Period, *config) error) error {
	if cfg.err != nil {
		return fmt.Errorf("idem: Scheduler.Add %s: %w", job, cfg.err)
	}
	if err := idemstore.ValidateJob(job); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.state >= schedStopping {
		return ErrSchedulerClosed
	}
	if _, dup := s.byName[job]; dup {
		return fmt.Errorf("idem: Scheduler.Add %s: a job of this name was added already", job)
	}
	j := &schedJob{name: job, sched: sched, cfg: cfg, run: run, index: -1}
	j.cfg.catchUp.stop = s.stopping
	j.cfg.catchUp.scheduled = true
	j.st = JobStatus{Job: job, Schedule: sched.String()}
	s.jobs = append(s.jobs, j)
	s.byName[job] = j
	if s.state == schedRunning {
		// Its first look is now: catch up on what it missed.
		s.schedule(j, s.clock.Now())
		s.wake()
	}
	return nil
}

// stopping reports whether the Scheduler is shutting down: a catch-up
// starts no further period then.
func (s *Scheduler) stopping() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.state >= schedStopping
}

// Run runs the jobs until ctx ends or [Scheduler.Shutdown] is called, and
// returns once every run it started has ended (and recorded its end). Each
// job's first look is at once: it catches up on the periods it missed.
//
// When ctx ends, running fns get their context cancelled at once (use
// Shutdown for a grace period); Run returns ctx's cause. After Shutdown,
// it returns [ErrSchedulerClosed]. A Scheduler runs once: a second Run
// returns ErrSchedulerClosed at once.
func (s *Scheduler) Run(ctx context.Context) error {
	s.mu.Lock()
	if s.state != schedIdle {
		s.mu.Unlock()
		return ErrSchedulerClosed
	}
	if err := s.cfg.probe.err; err != nil {
		s.mu.Unlock()
		return fmt.Errorf("idem: NewScheduler: %w", err)
	}
	s.state = schedRunning
	work, hard := context.WithCancelCause(context.WithoutCancel(ctx))
	s.hardStop = hard
	now := s.clock.Now()
	for _, j := range s.jobs {
		s.schedule(j, now)
	}
	s.startRelays(work)
	s.mu.Unlock()
	defer close(s.finished)

	var timerAt time.Time
	var timer <-chan time.Time
	for {
		s.mu.Lock()
		now := s.clock.Now()
		s.checked = now
		if s.state >= schedStopping {
			s.mu.Unlock()
			break
		}
		s.dispatchWork(work, now)
		wake := now.Add(Recheck)
		if len(s.due) > 0 && s.due[0].wake.Before(wake) {
			wake = s.due[0].wake
		}
		s.mu.Unlock()
		if timer == nil || !wake.Equal(timerAt) {
			timerAt, timer = wake, s.clock.After(wake.Sub(now))
		}
		if !s.clock.Now().Before(wake) {
			// The clock passed wake while the timer was being set: a
			// fake clock may not fire it.
			timer = nil
			continue
		}
		select {
		case <-ctx.Done():
			s.mu.Lock()
			s.state = schedStopping
			s.mu.Unlock()
			hard(context.Cause(ctx))
		case <-s.kick:
		case <-timer:
			timer = nil
		}
	}
	s.stopRelays()
	s.runs.Wait()
	hard(ErrSchedulerClosed)
	s.mu.Lock()
	s.state = schedStopped
	s.mu.Unlock()
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	return ErrSchedulerClosed
}

// Shutdown stops the Scheduler gracefully: no run starts any more, and no
// catch-up goes on to a further period; the runs in progress go on until
// they end, or until ctx ends, when their fns' contexts are cancelled. The
// ends of the runs are recorded either way: a period whose fn finished is
// done; one whose fn was cancelled failed and runs again later (in
// AtMostOnce: is unknown, unless fn returned a [NothingHappened] error).
// Shutdown returns once Run has returned; it returns ctx's error if ctx
// ended first, nil otherwise. Calling it on a Scheduler that never ran
// closes it.
func (s *Scheduler) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	switch s.state {
	case schedIdle:
		s.state = schedStopped
		s.mu.Unlock()
		return nil
	case schedRunning:
		s.state = schedStopping
	}
	s.mu.Unlock()
	s.wake()
	select {
	case <-s.finished:
		return nil
	case <-ctx.Done():
	}
	s.mu.Lock()
	hard := s.hardStop
	s.mu.Unlock()
	if hard != nil {
		hard(fmt.Errorf("idem: scheduler shut down: %w", context.Cause(ctx)))
	}
	<-s.finished // the runs record their ends (without ctx) and return
	return ctx.Err()
}

// wake makes the loop look again.
func (s *Scheduler) wake() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// schedule puts j in the due heap to be looked at at wake (now for a job
// not looked at yet).
func (s *Scheduler) schedule(j *schedJob, wake time.Time) {
	if j.since.IsZero() {
		j.since = wake // its first look
	}
	j.wake = wake
	j.st.NextRun = wake
	if j.index >= 0 {
		heap.Fix(&s.due, j.index)
		return
	}
	heap.Push(&s.due, j)
}

// dispatchWork moves the jobs whose wake time has come to the ready list
// and starts those that the run checks let through. Called with s.mu held.
func (s *Scheduler) dispatchWork(ctx context.Context, now time.Time) {
	for len(s.due) > 0 && !s.due[0].wake.After(now) {
		j := heap.Pop(&s.due).(*schedJob)
		if j.catching && !j.cfg.job.overlapping {
			continue // its catch-up's end looks at it again
		}
		if j.holder != "" {
			if now.Before(j.holderUntil) && now.Before(j.slot) && !holder.Gone(j.holder) {
				// The holder lives and its lease lasts: nothing to take over.
				s.schedule(j, earliest(earliest(j.slot, j.holderUntil), now.Add(probeEvery(j))))
				continue
			}
			j.holder = "" // gone, or its lease ended, or the job is due: look
		}
		if !j.queued {
			j.queued = true
			s.ready = append(s.ready, j)
		}
	}
	kept := s.ready[:0]
	for _, j := range s.ready {
		reason := ""
		for _, check := range s.checks {
			if reason = check(j); reason != "" {
				break
			}
		}
		j.st.Deferred = reason
		if reason != "" {
			kept = append(kept, j)
			continue
		}
		j.queued = false
		s.start(ctx, j, now)
	}
	clear(s.ready[len(kept):])
	s.ready = kept
}

// slotCheck is the run check of WithMaxRunning.
func (s *Scheduler) slotCheck(*schedJob) string {
	if s.running >= s.cfg.maxRunning {
		return fmt.Sprintf("waiting for one of the %d running jobs to end (WithMaxRunning)", s.running)
	}
	return ""
}

// start starts j's due work: a catch-up, or, while one runs and j runs
// overlapping, a run of each period due since. Called with s.mu held.
func (s *Scheduler) start(ctx context.Context, j *schedJob, now time.Time) {
	last := j.cfg.catchUp.lastDue(j.sched, now)
	if !j.catching {
		j.catching = true
		j.covered = last.Name
		s.launch(j, func() { s.catchUp(ctx, j) })
		if j.cfg.job.overlapping {
			s.schedule(j, s.nextWake(j, now)) // its next period may start alongside
		}
		return
	}
	// Overlapping: each period due after those taken on runs on its own.
	for p := j.sched.Next(mustParse(j.sched, j.covered)); !p.Start.After(last.Start); p = j.sched.Next(p) {
		j.covered = p.Name
		j.extra++
		s.launch(j, func() { s.runOne(ctx, j, p) })
	}
	s.schedule(j, s.nextWake(j, now))
}

func (s *Scheduler) launch(j *schedJob, f func()) {
	s.running++
	j.st.Running = true
	s.runs.Add(1)
	go func() {
		defer s.runs.Done()
		f()
	}()
}

// catchUp runs j's catch-up and schedules its next look.
func (s *Scheduler) catchUp(ctx context.Context, j *schedJob) {
	cfg := *j.cfg
	cfg.catchUp.progress = func(cursor string) {
		s.mu.Lock()
		defer s.mu.Unlock()
		j.cursor = cursor
	}
	res, err := catchUp(ctx, s.store, j.name, j.sched, &cfg, j.run)
	now := s.clock.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.running--
	j.catching = false
	j.st.Running = j.extra > 0
	s.record(j, res.Periods, now, true)
	if res.Cursor != "" {
		j.cursor = res.Cursor
	}
	wake := s.nextWake(j, now)
	if j.index >= 0 { // an overlapping job, looked at while its catch-up ran
		wake = earliest(wake, j.wake)
	}
	var ie *Error
	deferred := ""
	switch {
	case s.state >= schedStopping:
		return
	case err == nil && res.Deferred > 0:
		wake = now // the cap: go on, after the others due now
	case err == nil && res.Cursor != "" && !s.oldestDue(j, now).IsZero() && len(res.Periods) > 0:
		wake = now // due since the catch-up looked
	case errors.As(err, &ie) && ie.Outcome == BackingOff && !ie.NotBefore.IsZero():
		wake = earliest(wake, ie.NotBefore)
	case errors.As(err, &ie) && ie.Outcome == InProgress:
		wake = s.watchHolder(j, ie, now, wake)
	case errors.As(err, &ie) && ie.Outcome == LeaseLost:
		// A newer attempt holds the period: if it died, its lease ends.
		wake = earliest(wake, now.Add(j.cfg.lease))
	case errors.As(err, &ie) && ie.Outcome == Deferred:
		// A guard or a breaker said this host cannot take more now: nothing
		// was claimed. Look again at the next recheck (an open breaker: when
		// it lets a probe through), not at once.
		next := now.Add(Recheck)
		var d *Deferral
		if errors.As(err, &d) {
			deferred = d.Error()
			if d.Until.After(now) {
				next = d.Until
			}
		}
		wake = earliest(wake, next)
	case errors.As(err, &ie) && (ie.Outcome == Parked || ie.Outcome == Unknown || ie.Outcome == ParamsMismatch):
		// A person must settle it; look again at the next due time.
	case err != nil:
		if s.logger != nil {
			s.logger.LogAttrs(context.Background(), slog.LevelWarn, "idem: scheduler: catch-up failed",
				slog.String("job", j.name), slog.Any("error", err))
		}
		wake = earliest(wake, now.Add(Recheck))
	}
	j.st.Deferred = deferred
	if err != nil && deferred == "" {
		j.st.LastError = err.Error()
	} else {
		j.st.LastError = ""
	}
	s.schedule(j, wake)
	s.wake()
}

// watchHolder is the next look at j, whose catch-up found a period held by
// another replica (ie), the next one being due at slot: when the holder's
// lease ends, as the store reported it (a lease from now, if it did not
// or if its clock is behind this one); and, if the holder is a process of
// this host, as soon as a probe finds it dead (see dispatchWork).
func (s *Scheduler) watchHolder(j *schedJob, ie *Error, now, slot time.Time) time.Time {
	until := ie.LeaseUntil
	if !until.After(now) {
		until = now.Add(j.cfg.lease)
	}
	wake := earliest(slot, until)
	if holder.Local(ie.Holder) {
		j.holder, j.holderUntil, j.slot = ie.Holder, until, slot
		wake = earliest(wake, now.Add(probeEvery(j)))
	}
	return wake
}

// probeEvery is how often the holder of j's period is checked.
func probeEvery(j *schedJob) time.Duration { return min(holderProbe, j.cfg.lease/3) }

// oldestDue is the due time of j's oldest due period that is not known
// settled, zero if none: the period after the job's cursor, as a catch-up
// last read or moved it, if it is due at now; before any catch-up read the
// cursor, the job's first look (a period was due then, as far as this
// Scheduler knows). It does not wait for a catch-up to return.
func (s *Scheduler) oldestDue(j *schedJob, now time.Time) time.Time {
	if j.cursor == "" {
		if j.since.IsZero() || !now.After(j.since) {
			return time.Time{}
		}
		return j.since
	}
	c, err := j.sched.Parse(j.cursor)
	if err != nil {
		return time.Time{}
	}
	if due := j.cfg.catchUp.due(j.sched.Next(c)); !due.After(now) {
		return due
	}
	return time.Time{}
}

// runOne runs the single period p of an overlapping job.
func (s *Scheduler) runOne(ctx context.Context, j *schedJob, p Period) {
	var r Result
	cfg := *j.cfg
	cfg.report = &r
	cfg.catchUp.cursor = false
	err := j.run(ctx, Key{Job: j.name, Period: p.Name}, p, &cfg)
	now := s.clock.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.running--
	j.extra--
	j.st.Running = j.catching || j.extra > 0
	s.record(j, []PeriodResult{{Period: p, Outcome: r.Outcome, Err: err}}, now, false)
	if s.state < schedStopping {
		// The next catch-up settles the cursor over it, or retries it.
		s.schedule(j, earliest(j.wake, now))
		s.wake()
	}
}

// record notes what happened to periods in j's status. A catch-up's
// periods (all of them: it stops at, or goes past, every parked or unknown
// one after the cursor) set the parked and unknown counts; an overlapping
// run's only add to them.
func (s *Scheduler) record(j *schedJob, periods []PeriodResult, now time.Time, catchUp bool) {
	parked, unknown, mismatched := 0, 0, 0
	for _, pr := range periods {
		j.st.LastPeriod, j.st.LastOutcome, j.st.LastAt = pr.Period.Name, pr.Outcome, now
		switch pr.Outcome {
		case Ran, Recovered, AlreadyDone:
			if pr.Err == nil {
				j.st.LastSuccess = now
			}
		case Parked:
			parked++
		case Unknown:
			unknown++
		case ParamsMismatch:
			mismatched++
		}
	}
	if catchUp {
		j.st.Parked, j.st.Unknown, j.st.ParamsMismatch = parked, unknown, mismatched
	} else {
		j.st.Parked += parked
		j.st.Unknown += unknown
		j.st.ParamsMismatch += mismatched
	}
}

// nextWake is when j is to be looked at next, with nothing due now: when
// its next period is due, plus its jitter.
func (s *Scheduler) nextWake(j *schedJob, now time.Time) time.Time {
	next := j.cfg.catchUp.nextDue(j.sched, now)
	j.st.NextDue = next
	if d := j.cfg.job.jitter; d > 0 {
		next = next.Add(time.Duration(s.randInt(int64(d))))
	}
	return next
}

func mustParse(sched Schedule, name string) Period {
	p, err := sched.Parse(name)
	if err != nil {
		panic(fmt.Sprintf("idem: scheduler: period %q of %s: %v", name, sched, err))
	}
	return p
}

func earliest(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// jobHeap orders jobs by wake time.
type jobHeap []*schedJob

func (h jobHeap) Len() int           { return len(h) }
func (h jobHeap) Less(i, k int) bool { return h[i].wake.Before(h[k].wake) }
func (h jobHeap) Swap(i, k int) {
	h[i], h[k] = h[k], h[i]
	h[i].index, h[k].index = i, k
}
func (h *jobHeap) Push(x any) {
	j := x.(*schedJob)
	j.index = len(*h)
	*h = append(*h, j)
}
func (h *jobHeap) Pop() any {
	old := *h
	j := old[len(old)-1]
	old[len(old)-1] = nil
	j.index = -1
	*h = old[:len(old)-1]
	return j
}
