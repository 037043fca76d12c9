package idemotel

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/outbox"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// An Instrument is one of the metrics, with its OpenTelemetry name and
// unit and the name of the package prom's metric of the same meaning:
// the name an OpenTelemetry-to-Prometheus exporter gives it (dots become
// underscores, the unit "s" adds _seconds, a counter adds _total), checked
// by this module's tests against package prom's source.
type Instrument struct {
	Name        string // the OpenTelemetry name
	Kind        string // counter, histogram or gauge
	Unit        string // UCUM: s, or an annotation such as {call}
	Prometheus  string // package prom's name
	Description string
	Attributes  []attribute.Key // prom's labels, as attributes: idem.job for job, ...
}

// Instruments lists the metrics that [Metrics] records, the one table of
// their names: the counters and the histogram fed by each call's result
// and each delivery, and the gauges read at collection time from what
// [Metrics.Watch], [Metrics.WatchScheduler] and [Metrics.WatchOutbox] were
// given.
var Instruments = []Instrument{
	{"idem.runs", "counter", "{call}", "idem_runs_total",
		"Calls of idem's Run, by job and outcome (ran, already_done, recovered, skipped, in_progress, unknown, backing_off, parked, lease_lost, failed, params_mismatch, deferred).",
		[]attribute.Key{KeyJob, KeyOutcome}},
	{"idem.run.duration", "histogram", "s", "idem_run_duration_seconds",
		"How long each call of idem's Run took, in-process retries included.",
		[]attribute.Key{KeyJob}},
	{"idem.retries", "counter", "{attempt}", "idem_retries_total",
		"Attempts of a job's work beyond the first within one call of Run.",
		[]attribute.Key{KeyJob}},
	{"idem.errors", "counter", "{call}", "idem_errors_total",
		"Calls of idem's Run that failed: returned an error other than in_progress (another holder runs the period) or deferred.",
		[]attribute.Key{KeyJob}},
	{"idem.items", "counter", "{item}", "idem_items_total",
		"Items of the fan-out periods that idem's Each completed, by final status (done, parked).",
		[]attribute.Key{KeyJob, KeyStatus}},
	{"idem.deferrals", "counter", "{call}", "idem_deferrals_total",
		"Calls of idem deferred because a guard refused (reason: its name, such as memory or disk) or a breaker was open (reason: breaker).",
		[]attribute.Key{KeyJob, KeyReason}},
	{"idem.reruns", "counter", "{period}", "idem_reruns_total",
		"Periods that a re-run request (idem.Rerun) queued a re-run for, by job; a request sent again (seen before) is not counted.",
		[]attribute.Key{KeyJob}},
	{"idem.outbox.deliveries", "counter", "{delivery}", "idem_outbox_deliveries_total",
		"Delivery attempts of the outbox relay, by topic and how they ended (delivered, retrying, parked, superseded).",
		[]attribute.Key{KeyTopic, KeyOutcome}},

	// Read at collection time: Metrics.Watch.
	{"idem.keys", "gauge", "{key}", "idem_keys",
		"Keys of a job by status, read from the ledger at collection time: pending (running or failed, idem retries them), unknown (awaiting Resolve), parked (awaiting Reset).",
		[]attribute.Key{KeyJob, KeyStatus}},
	{"idem.ledger.up", "gauge", "", "idem_ledger_up",
		"1 if the last read of the ledger for idem.keys succeeded, 0 if it failed.", nil},
	// Metrics.WatchScheduler.
	{"idem.last_success.timestamp", "gauge", "s", "idem_last_success_timestamp_seconds",
		"When a period of the job last ran successfully or was found done, in Unix seconds (0: not since the Scheduler started).",
		[]attribute.Key{KeyJob}},
	{"idem.next_due.timestamp", "gauge", "s", "idem_next_due_timestamp_seconds",
		"When the job's next period is due, in Unix seconds.", []attribute.Key{KeyJob}},
	// Metrics.WatchOutbox.
	{"idem.outbox.messages", "gauge", "{message}", "idem_outbox_messages",
		"Outbox messages by topic and status, read at collection time: pending (the backlog), failing (pending after a failed attempt), delivered (not pruned yet), parked (awaiting a person's retry or drop).",
		[]attribute.Key{KeyTopic, KeyStatus}},
	{"idem.outbox.oldest_pending_age", "gauge", "s", "idem_outbox_oldest_pending_age_seconds",
		"How long the oldest pending message of the topic has waited since its transaction queued it, in seconds; 0 when none is pending.",
		[]attribute.Key{KeyTopic}},
	{"idem.outbox.up", "gauge", "", "idem_outbox_up",
		"1 if the last read of the outbox succeeded, 0 if it failed.", nil},
}

// KeyStatus is the item status of idem.items: done or parked.
const KeyStatus = attribute.Key("idem.status")

// DurationBuckets are idem.run.duration's explicit bucket boundaries, in
// seconds: package prom's DefaultBuckets (10 ms to one hour).
var DurationBuckets = []float64{0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 600, 1800, 3600}

// Metrics records idem's calls and the outbox relay's deliveries through
// an OpenTelemetry meter, with the meaning of package prom's metrics (see
// [Instruments]): "a call of Run" is one Run or RunTx, one period of a
// catch-up (skipped ones included), or one call of Each or EachTx (its
// items in idem.items, counted by the call that completes the period).
// It is safe for concurrent use.
type Metrics struct {
	runs, retries, errors, items, deferrals, deliveries, reruns metric.Int64Counter
	duration                                                    metric.Float64Histogram
	gauges                                                      *gauges
	jobs                                                        jobCache
}

// maxCachedJobs bounds the jobs whose attribute sets [Metrics.Observe]
// keeps; the calls of a job beyond them build theirs each time.
const maxCachedJobs = 4096

// jobCache keeps, per job, the measurement options of its series, built
// once: an attribute set is sorted and allocated when it is built, which
// cost a call more than recording it.
type jobCache struct {
	m sync.Map // job → *jobOpts
	n atomic.Int64
}

// jobOpts are one job's measurement options, as the slices the
// instruments' variadic calls take (passed whole: not a slice a call).
type jobOpts struct {
	add    []metric.AddOption                     // {idem.job}
	record []metric.RecordOption                  // {idem.job}
	runs   [16]atomic.Pointer[[]metric.AddOption] // {idem.job, idem.outcome} by outcome, built on first use
	seeded atomic.Bool                            // idem.retries and idem.errors have their series
}

// of returns job's options, nil when the cache is full and job not in it.
func (c *jobCache) of(job string, seen func(string)) *jobOpts {
	if o, ok := c.m.Load(job); ok {
		return o.(*jobOpts)
	}
	if c.n.Load() >= maxCachedJobs {
		return nil
	}
	seen(job) // once per job cached: the gauges report it from now on
	opt := metric.WithAttributeSet(attribute.NewSet(KeyJob.String(job)))
	o, loaded := c.m.LoadOrStore(job, &jobOpts{add: []metric.AddOption{opt}, record: []metric.RecordOption{opt}})
	if !loaded {
		c.n.Add(1)
	}
	return o.(*jobOpts)
}

// runsOptions are the options of idem.runs for job and outcome.
func (j *jobOpts) runsOptions(job string, outcome idem.Outcome) []metric.AddOption {
	if outcome < 0 || int(outcome) >= len(j.runs) {
		return []metric.AddOption{runsAttrs(job, outcome)}
	}
	if p := j.runs[outcome].Load(); p != nil {
		return *p
	}
	opts := []metric.AddOption{runsAttrs(job, outcome)}
	j.runs[outcome].Store(&opts)
	return opts
}

func runsAttrs(job string, outcome idem.Outcome) metric.AddOption {
	return metric.WithAttributeSet(attribute.NewSet(KeyJob.String(job), KeyOutcome.String(outcome.String())))
}

// NewMetrics creates the instruments of [Instruments] on a meter of mp.
func NewMetrics(mp metric.MeterProvider) (*Metrics, error) {
	meter := mp.Meter(ScopeName)
	m := &Metrics{}
	var errs []error
	counter := func(name string) metric.Int64Counter {
		in := instrument(name)
		c, err := meter.Int64Counter(in.Name, metric.WithUnit(in.Unit), metric.WithDescription(in.Description))
		errs = append(errs, err)
		return c
	}
	m.runs = counter("idem.runs")
	m.retries = counter("idem.retries")
	m.errors = counter("idem.errors")
	m.items = counter("idem.items")
	m.deferrals = counter("idem.deferrals")
	m.deliveries = counter("idem.outbox.deliveries")
	m.reruns = counter("idem.reruns")
	in := instrument("idem.run.duration")
	var err error
	m.duration, err = meter.Float64Histogram(in.Name, metric.WithUnit(in.Unit), metric.WithDescription(in.Description),
		metric.WithExplicitBucketBoundaries(DurationBuckets...))
	errs = append(errs, err, m.registerGauges(meter))
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("idem/otel: instruments: %w", err)
	}
	return m, nil
}

func instrument(name string) Instrument {
	for _, in := range Instruments {
		if in.Name == name {
			return in
		}
	}
	panic("idemotel: no instrument " + name)
}

// Observe records one call's result. It is the function to give
// idem.OnResult; [Metrics.Option] does that. A job's series of
// idem.retries and idem.errors start at its first call, at 0; the calls
// after it add to them only what is not 0 (with a delta temporality, an
// interval without retries or errors has no point for them).
func (m *Metrics) Observe(r idem.Result) {
	ctx := context.Background()
	o := m.jobs.of(r.Key.Job, m.gauges.seenJob)
	zeros := true // add the zeros of idem.retries and idem.errors too
	if o != nil {
		zeros = !o.seeded.Load()
		defer o.seeded.Store(true)
	} else {
		m.gauges.seenJob(r.Key.Job)
		opt := metric.WithAttributes(KeyJob.String(r.Key.Job))
		o = &jobOpts{add: []metric.AddOption{opt}, record: []metric.RecordOption{opt}}
	}
	m.runs.Add(ctx, 1, o.runsOptions(r.Key.Job, r.Outcome)...)
	m.duration.Record(ctx, r.Duration.Seconds(), o.record...)
	// The series of idem.retries and idem.errors exist from a job's first
	// call on, at 0; the calls after it add only what is not 0.
	if retries := int64(max(r.Attempts-1, 0)); retries > 0 || zeros {
		m.retries.Add(ctx, retries, o.add...)
	}
	if r.Err != nil && !r.Outcome.NotNow() {
		m.errors.Add(ctx, 1, o.add...)
	} else if zeros {
		m.errors.Add(ctx, 0, o.add...)
	}
	if r.Outcome == idem.Deferred {
		var d *idem.Deferral // allocated here only: errors.As takes its address
		if errors.As(r.Err, &d) {
			m.deferrals.Add(ctx, 1, metric.WithAttributes(KeyJob.String(r.Key.Job), KeyReason.String(d.Reason)))
		}
	}
	if r.Outcome == idem.Ran && r.Items.Total() > 0 {
		m.items.Add(ctx, r.Items.Done, metric.WithAttributes(KeyJob.String(r.Key.Job), KeyStatus.String("done")))
		m.items.Add(ctx, r.Items.Parked, metric.WithAttributes(KeyJob.String(r.Key.Job), KeyStatus.String("parked")))
	}
}

// Option returns idem.OnResult(m.Observe).
func (m *Metrics) Option() idem.Option { return idem.OnResult(m.Observe) }

// ObserveDelivery records one delivery attempt of the outbox relay. It is
// the function to give outbox.OnDelivery; [Metrics.RelayOption] does that.
func (m *Metrics) ObserveDelivery(r outbox.DeliveryResult) {
	m.gauges.seenTopic(r.Topic)
	m.deliveries.Add(context.Background(), 1, metric.WithAttributes(KeyTopic.String(r.Topic), KeyOutcome.String(r.Outcome.String())))
}

// ObserveRerun records what one re-run request did: give it the outcomes
// idem.Rerun returned. Each period the request queued a re-run for
// (RerunQueued, RerunAfterRun, RerunDue) adds 1 to idem.reruns of its job;
// a period the same request had queued before (RerunSeen) adds nothing.
func (m *Metrics) ObserveRerun(out []idem.RerunOutcome) {
	for _, o := range out {
		if o.State != idem.RerunSeen {
			m.reruns.Add(context.Background(), 1, metric.WithAttributes(KeyJob.String(o.Key.Job)))
		}
	}
}

// ObserveRerun records what one re-run request did (see
// [Metrics.ObserveRerun]).
func (t *Telemetry) ObserveRerun(out []idem.RerunOutcome) { t.metrics.ObserveRerun(out) }

// RelayOption returns outbox.OnDelivery(m.ObserveDelivery), for
// outbox.Relay, RelayOnce or a Scheduler's AddRelay.
func (m *Metrics) RelayOption() outbox.Option { return outbox.OnDelivery(m.ObserveDelivery) }

// RelayOption returns the relay option that records its deliveries'
// metrics (see [Metrics.RelayOption]). The relay's spans need none: the
// relay's context ([Telemetry.Context]) traces them.
func (t *Telemetry) RelayOption() outbox.Option { return t.metrics.RelayOption() }
