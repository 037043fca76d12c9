package idem

// The Scheduler runs jobs on their schedules inside a long-running
// process, each due period through a catch-up (catchup.go): a period is
// done once per store however many replicas run the same jobs, and the
// periods missed while the service was down run afterwards, in order.
// scheduler_deps.go checks dependencies between its jobs,
// scheduler_health.go serves its status, scheduler_relay.go runs its
// relays.

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
	"github.com/idemgo/idem/internal/timeheap"
)

// SchedulerRecheck is the longest a [Scheduler] waits before it reads the wall
// clock again. Its timers are monotonic and do not advance while the
// machine is suspended, so a wake-up or a clock step is noticed within
// SchedulerRecheck at most.
const SchedulerRecheck = time.Minute

// DefaultMaxRunning is how many jobs a Scheduler runs at once unless
// [WithMaxRunning] says otherwise.
const DefaultMaxRunning = 8

// ErrSchedulerClosed is returned by [Scheduler.Run] after [Scheduler.Shutdown],
// and by Add, AddTx and a second Run on a scheduler that has run.
var ErrSchedulerClosed = errors.New("idem: scheduler closed")

// schedulerConfig is what a Scheduler's own options set (config.sched).
type schedulerConfig struct {
	defaults   []Option // every job's defaults, before its own options
	err        error    // the first invalid option's
	maxRunning int
}

// WithMaxRunning caps how many jobs of a Scheduler run at once (default
// [DefaultMaxRunning]): a job that is due while n others run waits for one
// of them to end, its Status showing why. Size it from the store's
// connection budget: a running job holds a connection for each of its
// writes, and its lease renewals. An n below 1 is an error matching
// [ErrInvalidOption].
func WithMaxRunning(n int) Option {
	return newOption("WithMaxRunning", classScheduler, func(c *config) error {
		if n < 1 {
			return invalidOption("WithMaxRunning(%d): at least one job must be able to run", n)
		}
		c.sched.maxRunning = n
		return nil
	})
}

// jobConfig is what a Scheduler needs of a job besides the catch-up's
// config.
type jobConfig struct {
	jitter      time.Duration
	overlapping bool
	tolerance   time.Duration
}

// jobOption is the job option named name: set sets the job's config.
func jobOption(name string, set func(*jobConfig) error) Option {
	return newOption(name, classJob, func(c *config) error { return set(&c.job) })
}

// WithJitter delays each due run of the job by a random duration in [0, d),
// so that the replicas of a service, which all run the same jobs, do not
// reach the store at the same instant. A negative d is an error matching
// [ErrInvalidOption].
func WithJitter(d time.Duration) Option {
	return jobOption("WithJitter", func(c *jobConfig) error {
		if d < 0 {
			return invalidOption("WithJitter(%v): the jitter must not be negative", d)
		}
		c.jitter = d
		return nil
	})
}

// RunOverlapping lets a period that becomes due while the job's earlier
// periods still run start at once, as a Run of its own key, alongside
// them. By default the job waits: its periods run one after the other, in
// order, each once the one before it has ended.
func RunOverlapping() Option {
	return jobOption("RunOverlapping", func(c *jobConfig) error { c.overlapping = true; return nil })
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
	return jobOption("WithLagTolerance", func(c *jobConfig) error {
		if d <= 0 {
			return invalidOption("WithLagTolerance(%v): the tolerance must be positive", d)
		}
		c.tolerance = d
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
// also reads the wall clock at least every [SchedulerRecheck], because monotonic
// timers stand still while the machine is suspended. A wall clock that
// jumps forward makes the periods in between due: they run under the job's
// catch-up policy and caps ([CatchUpAll], [CatchUpLatest],
// [CatchUpWindow]). One that jumps back runs nothing again: the job's
// cursor in the store is past those periods.
//
// Guards ([WithGuard], as a job's option or the Scheduler's default) are
// asked before each period's claim. One that refuses defers the job: nothing
// is claimed or counted as a failure, [JobStatus].Deferred says why, and
// the Scheduler looks at the job again at the next [SchedulerRecheck], not at once.
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
// A change made by hand reaches it within [SchedulerWakePoll]: a reset or
// resolve, a re-run request ([Rerun]) or a "run now" ([Wake]), made in any
// process sharing the store, wakes the job in every Scheduler running it,
// which then looks at it at once rather than at its next due time. This
// needs a store that keeps wake marks ([idemstore.Waker]: the SQLite and
// Postgres ledgers); with another store, a Scheduler sees the change at the
// job's next due time, or when it restarts.
//
// The zero Scheduler is not usable; call NewScheduler. Its methods are safe
// for concurrent use.
//
// It does NOT promise that a period starts at its due time: a replica
// that is down, a full [WithMaxRunning], a job's jitter or its earlier
// periods delay it; nor, in [AtLeastOnce], that fn runs once (see the
// modes).
type Scheduler struct {
	store    Store
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
	due      timeheap.Heap[*schedJob] // jobs waiting for their wake time
	ready    []*schedJob              // jobs due, waiting for a run check (a slot)
	running  int                      // runs in flight
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
	opts  []Option        // the Scheduler's defaults, then the job's own options
	cu    catchUpSettings // the job's catch-up settings (when its periods are due)
	job   jobConfig       // the job's settings
	lease time.Duration   // the job's lease
	obs   func(Result)    // the job's observers, the store's left out: what its fn's Each calls report to too
	// catchUp runs the job's catch-up with its options and extra; runOne
	// runs one period of it (an overlapping job's) likewise.
	catchUp func(ctx context.Context, look *schedLook) (CatchUpResult, error)
	runOne  func(ctx context.Context, key Key, p Period, extra []Option) error

	index    int       // in the due heap; -1 when not in it
	wake     time.Time // when to look at the job next
	queued   bool      // in the ready list
	catching bool      // a catch-up runs
	rewake   bool      // woken while its catch-up ran: look again when it returns
	covered  string    // the latest period a catch-up or overlapping run has taken on
	extra    int       // overlapping single-period runs in flight
	again    bool      // look again as soon as the running catch-up ends (RerunWithDependents)
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

// NewScheduler returns a Scheduler whose jobs keep their periods in store. opts
// are the Scheduler's: [WithMaxRunning], and the options of every call
// (WithLease, WithBackoff, ...), which are the defaults of every
// job (a job's own options override them); WithClock and
// WithLogger also set the Scheduler's own clock and logger. An
// invalid option makes Add and Run return its error.
//
// The store keeps each job's catch-up cursor: behind it there must be an
// [idemstore.CatchUpStore] (Ledger, StateFile and the Postgres
// and Redis stores have one); another store makes Add and Run return an
// error naming it. New panics if store is nil.
func NewScheduler(store Store, opts ...Option) *Scheduler {
	if store == nil {
		panic("idem: NewScheduler needs a store")
	}
	s := &Scheduler{
		store:    store,
		randInt:  rand.Int64N,
		kick:     make(chan struct{}, 1),
		finished: make(chan struct{}),
		byName:   map[string]*schedJob{},
	}
	probe := configure(store, callScheduler, opts)
	s.cfg = probe.sched
	s.cfg.err = probe.err
	if _, err := storeAs[idemstore.CatchUpStore]("NewScheduler", store); err != nil {
		s.cfg.err = err
	}
	s.cfg.defaults = schedulerDefaults(opts)
	s.clock, s.logger = probe.clock, probe.logger
	s.checks = append(s.checks, s.slotCheck)
	return s
}

// Add registers the job named job: fn runs once for each period of sched,
// as in [CatchUp], with opts (and the Scheduler's defaults). Jobs may
// be added before Run or while it runs.
//
// An invalid job name, option or schedule, or a name added twice, is an
// error (ErrInvalidOption for options; the job is not added). fn must
// not be nil.
func (s *Scheduler) Add(job string, sched Schedule, fn func(ctx context.Context, p Period) error, opts ...Option) error {
	if fn == nil || sched == nil {
		panic("idem: Scheduler.Add needs a schedule and a fn")
	}
	return s.add(job, sched, callJob, opts, func(j *schedJob) {
		j.catchUp = func(ctx context.Context, look *schedLook) (CatchUpResult, error) {
			return catchUp(ctx, s.store, j.name, j.sched, func(ctx context.Context, p Period) error {
				return fn(withJobObserver(ctx, j.obs), p)
			}, j.opts, look)
		}
		j.runOne = func(ctx context.Context, key Key, p Period, extra []Option) error {
			return RunOn(withJobObserver(ctx, j.obs), s.store, key, func(ctx context.Context) error { return fn(ctx, p) },
				append(runOptions(j.opts), extra...)...)
		}
	})
}

// AddTx registers a transactional job, as [Scheduler.Add] does a plain
// one: each period runs through [CatchUpTx], and fn's writes, the
// period's done mark and the job's cursor commit in one transaction of the
// store's database. The store behind the Scheduler's must be an
// [idemstore.CatchUpTxStore] of Tx (a Ledger's is *sql.Tx); otherwise AddTx
// returns an error and adds nothing.
func AddTx[Tx any](s *Scheduler, job string, sched Schedule, fn func(ctx context.Context, tx Tx, p Period) error, opts ...Option) error {
	if fn == nil || sched == nil {
		panic("idem: AddTx needs a schedule and a fn")
	}
	cs, err := storeAs[idemstore.CatchUpTxStore[Tx]]("AddTx "+job, s.store)
	if err != nil {
		return err
	}
	ts := TxStoreOf[Tx](cs)
	return s.add(job, sched, callJobTx, opts, func(j *schedJob) {
		j.catchUp = func(ctx context.Context, look *schedLook) (CatchUpResult, error) {
			return catchUpTx(ctx, ts, j.name, j.sched, func(ctx context.Context, tx Tx, p Period) error {
				return fn(withJobObserver(ctx, j.obs), tx, p)
			}, j.opts, look)
		}
		j.runOne = func(ctx context.Context, key Key, p Period, extra []Option) error {
			return RunTx(withJobObserver(ctx, j.obs), ts, key, func(ctx context.Context, tx Tx) error { return fn(ctx, tx, p) },
				append(runOptions(j.opts), extra...)...)
		}
	})
}

// add adds the job named job, whose call (Scheduler.Add or AddTx) took
// opts; set sets its runs.
func (s *Scheduler) add(job string, sched Schedule, cl call, opts []Option, set func(*schedJob)) error {
	if err := s.cfg.err; err != nil {
		return fmt.Errorf("idem: Scheduler.Add %s: %w", job, err)
	}
	all := append(append([]Option(nil), s.cfg.defaults...), opts...)
	cfg := configure(s.store, cl, all)
	cu, jc := cfg.catchUp, cfg.job
	if err := cfg.err; err != nil {
		return fmt.Errorf("idem: Scheduler.Add %s: %w", job, err)
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
	if jc.overlapping && len(cu.Deps) > 0 {
		// An overlapping period runs on its own, outside the catch-up
		// that checks what it waits for.
		return fmt.Errorf("idem: Scheduler.Add %s: %w: RunOverlapping with After or AfterPrevious: a period that waits cannot run alongside others",
			job, ErrInvalidOption)
	}
	if err := s.checkDeps(job, sched, cu.Deps); err != nil {
		return err
	}
	// What the job's catch-up takes: all but the job's own settings.
	var cuOpts []Option
	for _, o := range all {
		if o == nil || o.option().class != classJob {
			cuOpts = append(cuOpts, o)
		}
	}
	j := &schedJob{name: job, sched: sched, opts: cuOpts, cu: cu, job: jc, lease: cfg.lease, obs: observersOf(all), index: -1}
	set(j)
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
	if err := s.cfg.err; err != nil {
		s.mu.Unlock()
		return fmt.Errorf("idem: NewScheduler: %w", err)
	}
	s.state = schedRunning
	work, hard := context.WithCancelCause(context.WithoutCancel(ctx))
	s.hardStop = hard
	s.mu.Unlock()
	wakes := s.startWakes(ctx)
	s.mu.Lock()
	now := s.clock.Now()
	for _, j := range s.jobs {
		s.schedule(j, now)
	}
	s.startRelays(work)
	s.mu.Unlock()
	defer close(s.finished)
	if wakes != nil {
		go wakes.run(work, s)
	}

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
		wake := now.Add(SchedulerRecheck)
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
	wakes.halt()
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
		if j.catching && !j.job.overlapping {
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
	last := j.cu.LastDue(j.sched, now)
	if !j.catching {
		j.catching = true
		j.covered = last.Name
		s.launch(j, func() { s.catchUp(ctx, j) })
		if j.job.overlapping {
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
	// The Scheduler's own settings of the job's catch-up: it stops when
	// the Scheduler does, it is a look rather than a trigger, and it tells
	// the job's cursor as it goes.
	look := &schedLook{stop: s.stopping, progress: func(cursor string) {
		s.mu.Lock()
		defer s.mu.Unlock()
		j.cursor = cursor
	}}
	sctx, endSpan := idemstore.StartSpan(ctx, idemstore.SpanStart{Kind: idemstore.SpanSlot, Key: Key{Job: j.name}})
	res, err := j.catchUp(sctx, look)
	endSpan(idemstore.SpanEnd{Err: err, Attrs: []idemstore.Attr{{Key: idemstore.AttrPeriods, Value: len(res.Periods)}}})
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
	waiting := ""
	for _, pr := range res.Periods { // a re-run behind the cursor, or the period the walk stopped at
		if pr.Outcome == Waiting {
			waiting = pr.Period.Name + " waits for " + pr.Waiting.String()
			break
		}
	}
	j.st.Waiting = waiting
	if settledSome(res.Periods) {
		s.wakeDependents(j.name, now)
	}
	wake := s.nextWake(j, now)
	if j.index >= 0 { // an overlapping job, looked at while its catch-up ran
		wake = earliest(wake, j.wake)
	}
	if j.again { // re-runs were asked for while it ran
		j.again, wake = false, now
	}
	var ie *Error
	deferred := ""
	switch {
	case s.state >= schedStopping:
		return
	case err == nil && waiting != "":
		// Its upstream's done marks wake it: this Scheduler's at once
		// (wakeDependents), another replica's at the next recheck.
		wake = earliest(wake, now.Add(SchedulerRecheck))
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
		wake = earliest(wake, now.Add(j.lease))
	case errors.As(err, &ie) && ie.Outcome == Deferred:
		// A guard or a breaker said this host cannot take more now: nothing
		// was claimed. Look again at the next recheck (an open breaker: when
		// it lets a probe through), not at once.
		next := now.Add(SchedulerRecheck)
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
		wake = earliest(wake, now.Add(SchedulerRecheck))
	}
	if j.rewake {
		// Woken (a reset, a resolve, a re-run) while it ran: look again now.
		j.rewake = false
		wake = now
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
		until = now.Add(j.lease)
	}
	wake := earliest(slot, until)
	if holder.Local(ie.Holder) {
		j.holder, j.holderUntil, j.slot = ie.Holder, until, slot
		wake = earliest(wake, now.Add(probeEvery(j)))
	}
	return wake
}

// probeEvery is how often the holder of j's period is checked.
func probeEvery(j *schedJob) time.Duration { return min(holderProbe, j.lease/3) }

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
	if due := j.cu.Due(j.sched.Next(c)); !due.After(now) {
		return due
	}
	return time.Time{}
}

// runOne runs the single period p of an overlapping job.
func (s *Scheduler) runOne(ctx context.Context, j *schedJob, p Period) {
	var r Result
	key := Key{Job: j.name, Period: p.Name}
	sctx, endSpan := idemstore.StartSpan(ctx, idemstore.SpanStart{Kind: idemstore.SpanSlot, Key: key})
	err := j.runOne(sctx, key, p, []Option{ReportTo(&r)})
	endSpan(idemstore.SpanEnd{Outcome: r.Outcome.String(), Err: err})
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
	next := j.cu.NextDue(j.sched, now)
	j.st.NextDue = next
	if d := j.job.jitter; d > 0 {
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

// HeapTime and HeapIndex place a job in the heap of jobs by wake time.
func (j *schedJob) HeapTime() time.Time { return j.wake }
func (j *schedJob) HeapIndex() *int     { return &j.index }

// schedLook is a Scheduler's own part of a job's catch-up: it stops when
// the Scheduler does (stop), it is a look rather than a trigger, and it
// tells the job's cursor as it goes (progress).
type schedLook struct {
	stop     func() bool
	progress func(cursor string)
}

// set sets the look's part of cu.
func (l *schedLook) set(cu *catchUpSettings) {
	cu.Stop, cu.Scheduled, cu.Progress = l.stop, true, l.progress
}

// schedulerDefaults is opts without the Scheduler's own: every job's
// defaults (nil ones kept, for their error).
func schedulerDefaults(opts []Option) []Option { return withoutClasses(opts, classScheduler) }

// withJobObserver is ctx carrying f, the observers of a Scheduler's job:
// the Each and EachTx calls of its fn report to them too.
func withJobObserver(ctx context.Context, f func(Result)) context.Context {
	if f == nil {
		return ctx
	}
	return context.WithValue(ctx, jobObserverKey{}, f)
}

// observersOf is the observers (OnResult) among opts, called in order;
// nil if none.
func observersOf(opts []Option) func(Result) {
	var f func(Result)
	for _, o := range opts {
		if o != nil && o.option().class == classCommon {
			c := &config{}
			if o.option().apply(c) == nil {
				f = chainObservers(f, c.observer)
			}
		}
	}
	return f
}
