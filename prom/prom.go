// Package prom exports idem's runs and ledger state as Prometheus metrics.
//
// It is a separate module, github.com/idemgo/idem/prom, so that the core
// module does not depend on the Prometheus client.
//
//	m, err := prom.New(prometheus.DefaultRegisterer)
//	if err != nil { ... }
//	m.Watch(ledger) // idem_keys from the ledger, read at scrape time
//	err = ledger.Run(ctx, key, fn, m.Option())
//
// Metrics:
//
//	idem_runs_total{job,outcome}      counter    calls of Run by outcome (idem.Outcome.String(): ran, already_done, parked, ...)
//	idem_run_duration_seconds{job}    histogram  how long each call of Run took, waits and retries included
//	idem_retries_total{job}           counter    extra attempts of fn within a call (Result.Attempts-1)
//	idem_errors_total{job}            counter    calls of Run that failed: returned an error whose outcome is not "not now" (idem.Outcome.NotNow: in_progress, deferred)
//	idem_items_total{job,status}      counter    items of the fan-out periods completed (Each returned ran), by final status: done, parked
//	idem_deferrals_total{job,reason}  counter    calls deferred by a guard, a breaker or a shared limit (idem.ErrDeferred), by reason: the guard's name (memory, disk, ...), breaker, or "limit NAME"
//	idem_reruns_total{job}            counter    periods a re-run request (idem.Rerun) queued a re-run for: not those the same request had queued before (RerunSeen); fed by [Metrics.ObserveRerun]
//	idem_keys{job,status}             gauge      keys that are pending (running or failed), unknown or parked, read from the Lister at scrape time
//	idem_ledger_up                    gauge      1 if the last read of the Lister succeeded, 0 if it failed (only with a Lister)
//	idem_last_success_timestamp_seconds{job}  gauge  when a period of the job last ran successfully (or was found done), in Unix seconds; 0 if not since the Scheduler started (only with WatchScheduler)
//	idem_next_due_timestamp_seconds{job}      gauge  when the job's next period is due, in Unix seconds (only with WatchScheduler)
//	idem_scheduler_lag_seconds{job}           gauge  how long the job's oldest due period not known settled has been due (idem.JobStatus.Lag); 0 when nothing due is unsettled (only with WatchScheduler)
//	idem_scheduler_ready{job}                 gauge  1 if the job is ready in the Scheduler's Status, 0 if not: a period unknown, claimed with other parameters, or lagging past WithLagTolerance (only with WatchScheduler)
//	idem_scheduler_lagging{job}               gauge  1 if the job is unready because its lag passed its WithLagTolerance (and for no earlier reason), else 0 (only with WatchScheduler)
//
// A "call of Run" is one Run or RunTx, one period of CatchUp (skipped
// periods included), or one call of Each or EachTx: a fan-out period is
// counted once per call, with its outcome, not per item. Its items are
// counted in idem_items_total by the call that completes the period (two
// hosts completing one period at the same moment may both count them).
//
// With a Scheduler ([Metrics.WatchScheduler]), alert as cron monitoring
// does: time() - idem_last_success_timestamp_seconds{job="settle"} > 26*3600
// for a daily job (its last success is more than a day and its run's
// length ago), or time() - idem_next_due_timestamp_seconds > 600 (the
// Scheduler's loop is stuck: a due time stays in the past).
//
// Alert on idem_keys{status="unknown"} > 0 (a person must run Resolve) and
// idem_keys{status="parked"} > 0 (a key is parked; Reset it once fixed).
//
// Ready-made Prometheus alert rules for these metrics are in the module's
// alerts/idem.rules.yml, and a Grafana dashboard in
// alerts/idem-dashboard.json (docs/operators.md says how to load them).
//
// The transactional outbox (outbox.Put, idem.Relay) has metrics of its own:
// [NewOutbox], fed by the relay ([Outbox.RelayOption]) and reading the
// store at scrape time ([Outbox.Watch]):
//
//	o, err := prom.NewOutbox(prometheus.DefaultRegisterer)
//	if err != nil { ... }
//	o.Watch(ledger) // idem_outbox_messages, idem_outbox_oldest_pending_age_seconds
//	err = outbox.Relay(ctx, ledger, outbox.Webhook(url, nil), o.RelayOption())
package prom

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemstore"
	"github.com/idemgo/idem/internal/gauge"
	"github.com/prometheus/client_golang/prometheus"
)

// DefaultBuckets are the run-duration histogram's buckets, in seconds: from
// 10 ms to one hour, since scheduled jobs range from quick pings to long
// settlements.
var DefaultBuckets = []float64{0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 600, 1800, 3600}

// DefaultScrapeTimeout bounds the ledger reads of one scrape.
const DefaultScrapeTimeout = 5 * time.Second

// The statuses reported by idem_keys. "pending" counts records that are
// running or failed (backing off): work not done yet that idem will retry
// by itself.
const (
	KeysPending = gauge.KeysPending
	KeysUnknown = gauge.KeysUnknown
	KeysParked  = gauge.KeysParked
)

// An Option configures [New].
type Option func(*config)

type config struct {
	buckets       []float64
	constLabels   prometheus.Labels
	lister        idemstore.Lister
	scrapeTimeout time.Duration
}

// WithBuckets sets the buckets of idem_run_duration_seconds (default
// [DefaultBuckets]).
func WithBuckets(b []float64) Option { return func(c *config) { c.buckets = b } }

// WithConstLabels adds labels with fixed values to every metric (for
// example the ledger's name when one process watches several).
func WithConstLabels(l prometheus.Labels) Option { return func(c *config) { c.constLabels = l } }

// WithLister reports idem_keys from l at scrape time; the same as calling
// [Metrics.Watch] after New.
func WithLister(l idemstore.Lister) Option { return func(c *config) { c.lister = l } }

// WithScrapeTimeout bounds the ledger reads of one scrape (default
// [DefaultScrapeTimeout]).
func WithScrapeTimeout(d time.Duration) Option { return func(c *config) { c.scrapeTimeout = d } }

// Metrics records idem runs as Prometheus metrics. Feed it with
// [Metrics.Option] (or [Metrics.Observe]); it is safe for concurrent use.
type Metrics struct {
	runs     *prometheus.CounterVec
	duration *prometheus.HistogramVec
	retries  *prometheus.CounterVec
	errors   *prometheus.CounterVec
	items    *prometheus.CounterVec
	deferred *prometheus.CounterVec
	reruns   *prometheus.CounterVec
	keys     *keysCollector
	sched    *schedulerCollector
}

// New creates the metrics and registers them with reg
// (prometheus.DefaultRegisterer if nil).
func New(reg prometheus.Registerer, opts ...Option) (*Metrics, error) {
	c := config{buckets: DefaultBuckets, scrapeTimeout: DefaultScrapeTimeout}
	for _, o := range opts {
		o(&c)
	}
	if reg == nil {
		reg = prometheus.DefaultRegisterer
	}
	m := &Metrics{
		runs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name:        "idem_runs_total",
			Help:        "Calls of idem's Run, by job and outcome (ran, already_done, recovered, skipped, in_progress, unknown, backing_off, parked, lease_lost, failed, params_mismatch, deferred, waiting).",
			ConstLabels: c.constLabels,
		}, []string{"job", "outcome"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:        "idem_run_duration_seconds",
			Help:        "How long each call of idem's Run took, in-process retries included.",
			Buckets:     c.buckets,
			ConstLabels: c.constLabels,
		}, []string{"job"}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name:        "idem_retries_total",
			Help:        "Attempts of a job's work beyond the first within one call of Run.",
			ConstLabels: c.constLabels,
		}, []string{"job"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name:        "idem_errors_total",
			Help:        "Calls of idem's Run that failed: returned an error other than in_progress (another holder runs the period) or deferred.",
			ConstLabels: c.constLabels,
		}, []string{"job"}),
		items: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name:        "idem_items_total",
			Help:        "Items of the fan-out periods that idem's Each completed, by final status (done, parked).",
			ConstLabels: c.constLabels,
		}, []string{"job", "status"}),
		deferred: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name:        "idem_deferrals_total",
			Help:        "Calls of idem deferred because a guard refused (reason: its name, such as memory or disk), a breaker was open (reason: breaker) or a shared limit could not be taken (reason: limit and its name).",
			ConstLabels: c.constLabels,
		}, []string{"job", "reason"}),
		reruns: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name:        "idem_reruns_total",
			Help:        "Periods that a re-run request (idem.Rerun) queued a re-run for, by job; a request sent again (seen before) is not counted.",
			ConstLabels: c.constLabels,
		}, []string{"job"}),
		keys:  newKeysCollector(c.constLabels, c.scrapeTimeout),
		sched: newSchedulerCollector(c.constLabels),
	}
	m.keys.setLister(c.lister)
	for _, col := range []prometheus.Collector{m.runs, m.duration, m.retries, m.errors, m.items, m.deferred, m.reruns, m.keys, m.sched} {
		if err := reg.Register(col); err != nil {
			return nil, fmt.Errorf("idem/prom: register: %w", err)
		}
	}
	return m, nil
}

// Item statuses of idem_items_total.
const (
	ItemsDone   = "done"
	ItemsParked = "parked"
)

// Observe records one Run's result (or one Each's: see the package doc).
// It is the function to give idem.OnResult; [Metrics.Option] does
// that.
func (m *Metrics) Observe(r idem.Result) {
	job := r.Key.Job
	m.keys.seen(job)
	m.runs.WithLabelValues(job, r.Outcome.String()).Inc()
	m.duration.WithLabelValues(job).Observe(r.Duration.Seconds())
	if r.Attempts > 1 {
		m.retries.WithLabelValues(job).Add(float64(r.Attempts - 1))
	} else {
		m.retries.WithLabelValues(job) // the series exists from the first run on, at 0
	}
	if r.Err != nil && !r.Outcome.NotNow() {
		m.errors.WithLabelValues(job).Inc()
	} else {
		m.errors.WithLabelValues(job)
	}
	var d *idem.Deferral
	if r.Outcome == idem.Deferred && errors.As(r.Err, &d) {
		m.deferred.WithLabelValues(job, d.Reason).Inc()
	}
	if r.Outcome == idem.Ran && r.Items.Total() > 0 {
		// Each completed the period now: every item is done or parked.
		m.items.WithLabelValues(job, ItemsDone).Add(float64(r.Items.Done))
		m.items.WithLabelValues(job, ItemsParked).Add(float64(r.Items.Parked))
	}
}

// ObserveRerun records what one re-run request did: give it the outcomes
// idem.Rerun returned. Each period the request queued a re-run for
// (RerunQueued, RerunAfterRun, RerunDue) adds 1 to idem_reruns_total of
// its job; a period the same request had queued before (RerunSeen: a
// retrying script, a double click) adds nothing. A refused request
// returns no outcomes, and so counts nothing.
func (m *Metrics) ObserveRerun(out []idem.RerunOutcome) {
	for _, o := range out {
		if o.State == idem.RerunSeen {
			m.reruns.WithLabelValues(o.Key.Job) // the series exists, at what it was
			continue
		}
		m.reruns.WithLabelValues(o.Key.Job).Inc()
	}
}

// Option returns an idem option that records every call it is passed to:
// idem.OnResult(m.Observe). Pass it to a Run, to CatchUp, to Each, or
// to idem.OpenLedger to record every call on that ledger.
func (m *Metrics) Option() idem.Option { return idem.OnResult(m.Observe) }

// Watch makes idem_keys report the records of l (a Ledger, or any
// idemstore.Lister), read at every scrape. A later call replaces l; nil stops
// reporting.
func (m *Metrics) Watch(l idemstore.Lister) { m.keys.setLister(l) }

// keysCollector computes idem_keys from a Lister at scrape time.
type keysCollector struct {
	keys    *prometheus.Desc
	up      *prometheus.Desc
	timeout time.Duration

	mu     sync.Mutex
	lister idemstore.Lister
	jobs   gauge.Seen // jobs seen, reported at 0 when they have no such keys
}

func newKeysCollector(constLabels prometheus.Labels, timeout time.Duration) *keysCollector {
	return &keysCollector{
		keys: prometheus.NewDesc("idem_keys",
			"Keys of a job by status, read from the ledger at scrape time: pending (running or failed, idem retries them), unknown (awaiting Resolve), parked (awaiting Reset).",
			[]string{"job", "status"}, constLabels),
		up: prometheus.NewDesc("idem_ledger_up",
			"1 if the last read of the ledger for idem_keys succeeded, 0 if it failed.",
			nil, constLabels),
		timeout: timeout,
	}
}

func (k *keysCollector) setLister(l idemstore.Lister) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.lister = l
}

func (k *keysCollector) seen(job string) { k.jobs.Add(job) }

// Describe implements prometheus.Collector.
func (k *keysCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- k.keys
	ch <- k.up
}

// Collect implements prometheus.Collector. It lists only the records that
// are not settled, one status at a time, so a ledger with a long history of
// done periods costs no more to scrape than one without.
func (k *keysCollector) Collect(ch chan<- prometheus.Metric) {
	k.mu.Lock()
	l := k.lister
	k.mu.Unlock()
	if l == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), k.timeout)
	defer cancel()
	counts, err := gauge.Keys(ctx, l)
	if err != nil {
		ch <- prometheus.MustNewConstMetric(k.up, prometheus.GaugeValue, 0)
		return
	}
	ch <- prometheus.MustNewConstMetric(k.up, prometheus.GaugeValue, 1)
	for _, job := range k.jobs.Jobs(counts) {
		for _, label := range gauge.KeyStatuses {
			ch <- prometheus.MustNewConstMetric(k.keys, prometheus.GaugeValue, float64(counts[job][label]), job, label)
		}
	}
}

// WatchScheduler makes idem_last_success_timestamp_seconds,
// idem_next_due_timestamp_seconds, idem_scheduler_lag_seconds,
// idem_scheduler_ready and idem_scheduler_lagging report the jobs of s,
// read from s.Status() at scrape time. Several Schedulers may be watched.
//
// They are what this Scheduler knows: its Status does not read the store,
// so a period that another replica settled counts as lag here until this
// Scheduler's next look at the job (the readiness probe, s.Handler(), reads
// the store first). Alert on idem_scheduler_lagging with a "for" longer
// than [idem.SchedulerRecheck].
func (m *Metrics) WatchScheduler(s *idem.Scheduler) { m.sched.add(s) }

// schedulerCollector computes the Scheduler gauges at scrape time.
type schedulerCollector struct {
	lastSuccess, nextDue, lag, ready, lagging *prometheus.Desc

	mu     sync.Mutex
	scheds []*idem.Scheduler
}

func newSchedulerCollector(constLabels prometheus.Labels) *schedulerCollector {
	return &schedulerCollector{
		lastSuccess: prometheus.NewDesc("idem_last_success_timestamp_seconds",
			"When a period of the job last ran successfully or was found done, in Unix seconds (0: not since the Scheduler started).",
			[]string{"job"}, constLabels),
		nextDue: prometheus.NewDesc("idem_next_due_timestamp_seconds",
			"When the job's next period is due, in Unix seconds.",
			[]string{"job"}, constLabels),
		lag: prometheus.NewDesc("idem_scheduler_lag_seconds",
			"How long the job's oldest due period not known settled has been due, in seconds, as far as the Scheduler knows; 0 when nothing due is unsettled.",
			[]string{"job"}, constLabels),
		ready: prometheus.NewDesc("idem_scheduler_ready",
			"1 if the job is ready in the Scheduler's status, 0 if not: a period is unknown, claimed with other parameters, or the job lags past its tolerance.",
			[]string{"job"}, constLabels),
		lagging: prometheus.NewDesc("idem_scheduler_lagging",
			"1 if the job is unready because it lags past its WithLagTolerance (and for no earlier reason), else 0.",
			[]string{"job"}, constLabels),
	}
}

func (c *schedulerCollector) add(s *idem.Scheduler) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.scheds = append(c.scheds, s)
}

func (c *schedulerCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.lastSuccess
	ch <- c.nextDue
	ch <- c.lag
	ch <- c.ready
	ch <- c.lagging
}

func (c *schedulerCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	scheds := slices.Clone(c.scheds)
	c.mu.Unlock()
	unix := func(t time.Time) float64 {
		if t.IsZero() {
			return 0
		}
		return float64(t.UnixNano()) / 1e9
	}
	for _, s := range scheds {
		for _, j := range s.Status().Jobs {
			ch <- prometheus.MustNewConstMetric(c.lastSuccess, prometheus.GaugeValue, unix(j.LastSuccess), j.Job)
			if !j.NextDue.IsZero() {
				ch <- prometheus.MustNewConstMetric(c.nextDue, prometheus.GaugeValue, unix(j.NextDue), j.Job)
			}
			ch <- prometheus.MustNewConstMetric(c.lag, prometheus.GaugeValue, j.Lag.Seconds(), j.Job)
			ch <- prometheus.MustNewConstMetric(c.ready, prometheus.GaugeValue, one(j.Ready), j.Job)
			ch <- prometheus.MustNewConstMetric(c.lagging, prometheus.GaugeValue, one(lagging(j)), j.Job)
		}
	}
}

// lagging reports whether j is unready because of its lag. The
// Scheduler's Status gives the first reason that applies, in this order:
// a period unknown, a period claimed with other parameters, then a lag
// past the job's tolerance; a job unready for an earlier reason is not
// reported lagging (its own alert says what to do).
func lagging(j idem.JobStatus) bool {
	return !j.Ready && j.Unknown == 0 && j.ParamsMismatch == 0
}

func one(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
