package idem

import (
	"context"
	"encoding/json"
	"net/http"
	"time"

	"github.com/idemgo/idem/idemstore"
)

// JobStatus is what a [Scheduler] knows of one job: from its own runs, and
// only since it started (the store holds the rest).
type JobStatus struct {
	Job      string `json:"job"`
	Schedule string `json:"schedule"` // the schedule's String
	// NextDue is when the job's next period is due; NextRun is when the
	// Scheduler looks at the job next (NextDue plus the jitter, or the end
	// of a backoff, or the retry of a period another replica holds).
	NextDue time.Time `json:"next_due"`
	NextRun time.Time `json:"next_run"`
	// The last period handled (ran, found done, failed...), its outcome
	// and when; LastError is the error of the last catch-up, if it failed.
	LastPeriod  string    `json:"last_period,omitempty"`
	LastOutcome Outcome   `json:"last_outcome,omitempty"`
	LastAt      time.Time `json:"last_at"`
	LastError   string    `json:"last_error,omitempty"`
	// LastSuccess is when a period last ran successfully, or was found
	// done by another replica.
	LastSuccess time.Time `json:"last_success"`
	// Lag is how long the oldest due period not known settled has been
	// due, as of the status's read: the period after the job's cursor as
	// a catch-up of this Scheduler last read or moved it (a catch-up that
	// has not returned, whose claim waits or whose fn hangs, included);
	// before any catch-up read the cursor (the store failing since the
	// start), since the job's first look. 0: nothing due is unsettled, as
	// far as this Scheduler knows. The readiness probe ([Scheduler.Handler])
	// reads the cursor of a job lagging past its [WithLagTolerance] from the
	// store: periods another replica settled meanwhile (while this one was
	// suspended, say) are no lag.
	Lag time.Duration `json:"lag_ns"`
	// Running: a run of the job is in progress in this process.
	Running bool `json:"running"`
	// Parked and Unknown count the periods the job's last catch-up found
	// parked or unknown: they wait for a person ('idem reset', 'idem
	// resolve', or Reset and Resolve). A parked period is an alert
	// (idem_keys{status="parked"}, the operator's page), not unreadiness:
	// every replica would turn unready for one bad day of data. The
	// job stays ready unless the handler is given [UnreadyWhenParked].
	Parked  int `json:"parked"`
	Unknown int `json:"unknown"`
	// ParamsMismatch counts the periods the job's last catch-up found
	// claimed with other parameters than the job's WithParams: the job
	// stops there until a person settles it (restores the parameters, or
	// resolves or resets the period).
	ParamsMismatch int `json:"params_mismatch"`
	// Deferred says why the job, although due, waits: a full
	// WithMaxRunning, or a guard or breaker (WithGuard, WithBreaker) that
	// deferred its last catch-up, which the Scheduler tries again at the
	// next recheck (an open breaker: when it lets a probe through). Empty
	// when it does not wait. A deferred job is still ready: the host is
	// busy, not broken; it turns unready once it lags more than its
	// WithLagTolerance.
	Deferred string `json:"deferred,omitempty"`
	// Waiting says which period of the job waits for which periods of
	// other jobs (After), as its last catch-up found them:
	// "2026-10-27 waits for settle/2026-10-27 (not run yet)". A waiting
	// job is ready; it turns unready once it lags more than its
	// WithLagTolerance, and the upstream job whose period is unknown is
	// unready itself (parked: see Parked).
	Waiting string `json:"waiting,omitempty"`
	// Ready is false when a period is unknown or claimed with other
	// parameters, or the job lags more than its WithLagTolerance (a
	// parked period too, in the answer of a Handler given
	// UnreadyWhenParked); Why says which.
	Ready bool   `json:"ready"`
	Why   string `json:"why,omitempty"`
}

// SchedulerStatus is the status of a Scheduler and its jobs.
type SchedulerStatus struct {
	// Ready is true when every job is.
	Ready bool `json:"ready"`
	// Checked is the wall-clock time the Scheduler last looked at its
	// jobs (zero before Run).
	Checked time.Time   `json:"checked"`
	Jobs    []JobStatus `json:"jobs"`
	// Relays are the outbox relays ([Scheduler.AddRelay]), in the order
	// they were added.
	Relays []RelayStatus `json:"relays,omitempty"`
}

// Status returns the status of the Scheduler's jobs, in the order they
// were added, as of now on the Scheduler's clock.
func (s *Scheduler) Status() SchedulerStatus {
	now := s.clock.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	st := SchedulerStatus{Ready: true, Checked: s.checked, Jobs: make([]JobStatus, 0, len(s.jobs))}
	for _, j := range s.jobs {
		js := j.st
		if oldest := s.oldestDue(j, now); !oldest.IsZero() && now.After(oldest) {
			js.Lag = now.Sub(oldest)
		}
		js.Ready = true
		switch {
		case js.Unknown > 0:
			js.Ready, js.Why = false, "a period's outcome is unknown: resolve it"
		case js.ParamsMismatch > 0:
			js.Ready, js.Why = false, "a period was claimed with other parameters (WithParams): restore them, or resolve or reset the period"
		case j.job.tolerance > 0 && js.Lag > j.job.tolerance:
			js.Ready, js.Why = false, "lagging "+js.Lag.Round(time.Second).String()+", more than its tolerance "+j.job.tolerance.String()
		}
		if !js.Ready {
			st.Ready = false
		}
		st.Jobs = append(st.Jobs, js)
	}
	for _, r := range s.relays {
		if !r.st.Ready {
			st.Ready = false
		}
		st.Relays = append(st.Relays, r.st)
	}
	return st
}

// A HandlerOption configures [Scheduler.Handler].
type HandlerOption func(*handlerConfig)

type handlerConfig struct{ parked bool }

// UnreadyWhenParked makes the handler answer 503, its jobs unready, while
// a job's last catch-up found a period parked. By default a parked period
// leaves the Scheduler ready: it waits for a person, whom an alert calls
// (idem_keys{status="parked"} > 0), and a readiness probe that failed on
// it would take every replica out of its load balancer at once.
func UnreadyWhenParked() HandlerOption { return func(c *handlerConfig) { c.parked = true } }

// Handler returns an http.Handler that serves the Scheduler's Status as
// JSON, with status 200 when it is ready and 503 when it is not: mount it
// as the service's readiness probe (/healthz, /readyz). A job that lags
// past its [WithLagTolerance] as far as this Scheduler knows has its cursor
// read from the store first, so that periods another replica settled are
// no lag (for 2 seconds at most: a store that does not answer leaves this
// Scheduler's knowledge). With the query
// ?live, it answers 200 whenever the Scheduler's loop has looked at its
// jobs within twice [SchedulerRecheck], a liveness probe.
func (s *Scheduler) Handler(opts ...HandlerOption) http.Handler {
	var c handlerConfig
	for _, o := range opts {
		o(&c)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, live := r.URL.Query()["live"]; !live {
			s.readCursors(r.Context())
		}
		st := s.Status()
		if c.parked {
			for i := range st.Jobs {
				if js := &st.Jobs[i]; js.Parked > 0 && js.Ready {
					js.Ready, js.Why, st.Ready = false, "a period is parked: reset it once the cause is fixed", false
				}
			}
		}
		code := http.StatusOK
		if _, live := r.URL.Query()["live"]; live {
			if st.Checked.IsZero() || s.clock.Now().Sub(st.Checked) > 2*SchedulerRecheck {
				code = http.StatusServiceUnavailable
			}
		} else if !st.Ready {
			code = http.StatusServiceUnavailable
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(st)
	})
}

// cursorRead bounds the readiness probe's read of the lagging jobs'
// cursors: a store that does not answer leaves the Scheduler's own
// knowledge.
const cursorRead = 2 * time.Second

// readCursors reads from the store the cursor of every job that lags past
// its tolerance as far as this Scheduler knows, and moves the job's cursor
// forward to it: another replica may have settled the periods this one
// counts as lag (this one was suspended, or its look is yet to come). A
// store that fails leaves the job as it was.
func (s *Scheduler) readCursors(ctx context.Context) {
	now := s.clock.Now()
	var lagging []*schedJob
	s.mu.Lock()
	for _, j := range s.jobs {
		if oldest := s.oldestDue(j, now); j.job.tolerance > 0 && !oldest.IsZero() && now.Sub(oldest) > j.job.tolerance {
			lagging = append(lagging, j)
		}
	}
	s.mu.Unlock()
	if len(lagging) == 0 {
		return
	}
	cs, err := storeAs[idemstore.CatchUpStore]("Handler", s.store)
	if err != nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, cursorRead)
	defer cancel()
	for _, j := range lagging {
		js, err := cs.Job(ctx, j.name)
		if err != nil || js.Cursor == "" {
			continue
		}
		stored, err := j.sched.Parse(js.Cursor)
		if err != nil {
			continue
		}
		s.mu.Lock()
		if known, err := j.sched.Parse(j.cursor); j.cursor == "" || err != nil || stored.Start.After(known.Start) {
			j.cursor = js.Cursor
		}
		s.mu.Unlock()
	}
}
