package idemotel

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemstore"
	"github.com/idemgo/idem/internal/gauge"
	"go.opentelemetry.io/otel/metric"
)

// ReadTimeout bounds the store reads of one collection of the gauges.
const ReadTimeout = 5 * time.Second

// The statuses of idem.keys (package prom's idem_keys): pending counts the
// records that are running or failed (backing off), work idem retries by
// itself.
const (
	KeysPending = gauge.KeysPending
	KeysUnknown = gauge.KeysUnknown
	KeysParked  = gauge.KeysParked
)

// OutboxSource is a store with an outbox, as [Metrics.WatchOutbox] reads
// it: idem.Ledger and the Postgres ledgers are.
type OutboxSource interface {
	OutboxStats(ctx context.Context) ([]idemstore.OutboxTopicStats, error)
}

// gauges is what the observable gauges read at each collection.
type gauges struct {
	keys, ledgerUp, outboxMessages, outboxUp metric.Int64ObservableGauge
	lastSuccess, nextDue, outboxAge          metric.Float64ObservableGauge

	mu     sync.Mutex
	lister idemstore.Lister
	outbox OutboxSource
	scheds []*idem.Scheduler
	jobs   gauge.Seen // jobs seen, reported at 0 when they have no such keys
	topics gauge.Seen // topics seen, likewise
}

func (m *Metrics) registerGauges(meter metric.Meter) error {
	g := &gauges{}
	var errs []error
	i64 := func(name string) metric.Int64ObservableGauge {
		in := instrument(name)
		o, err := meter.Int64ObservableGauge(in.Name, metric.WithUnit(in.Unit), metric.WithDescription(in.Description))
		errs = append(errs, err)
		return o
	}
	f64 := func(name string) metric.Float64ObservableGauge {
		in := instrument(name)
		o, err := meter.Float64ObservableGauge(in.Name, metric.WithUnit(in.Unit), metric.WithDescription(in.Description))
		errs = append(errs, err)
		return o
	}
	g.keys, g.ledgerUp = i64("idem.keys"), i64("idem.ledger.up")
	g.lastSuccess, g.nextDue = f64("idem.last_success.timestamp"), f64("idem.next_due.timestamp")
	g.outboxMessages, g.outboxAge, g.outboxUp = i64("idem.outbox.messages"), f64("idem.outbox.oldest_pending_age"), i64("idem.outbox.up")
	if err := errors.Join(errs...); err != nil {
		return err
	}
	_, err := meter.RegisterCallback(g.observe, g.keys, g.ledgerUp, g.lastSuccess, g.nextDue, g.outboxMessages, g.outboxAge, g.outboxUp)
	m.gauges = g
	return err
}

// Watch makes idem.keys report the records of l (a Ledger, or any
// idemstore.Lister) and idem.ledger.up whether reading them succeeded,
// read at every collection. A later call replaces l; nil stops reporting.
func (m *Metrics) Watch(l idemstore.Lister) {
	m.gauges.mu.Lock()
	defer m.gauges.mu.Unlock()
	m.gauges.lister = l
}

// WatchScheduler makes idem.last_success.timestamp and
// idem.next_due.timestamp report the jobs of s, from s.Status() at every
// collection. Several Schedulers may be watched.
func (m *Metrics) WatchScheduler(s *idem.Scheduler) {
	m.gauges.mu.Lock()
	defer m.gauges.mu.Unlock()
	m.gauges.scheds = append(m.gauges.scheds, s)
}

// WatchOutbox makes idem.outbox.messages, idem.outbox.oldest_pending_age
// and idem.outbox.up report the outbox of s (a Ledger or a Postgres
// ledger), read at every collection. A later call replaces s; nil stops.
func (m *Metrics) WatchOutbox(s OutboxSource) {
	m.gauges.mu.Lock()
	defer m.gauges.mu.Unlock()
	m.gauges.outbox = s
}

func (g *gauges) seenJob(job string)     { g.jobs.Add(job) }
func (g *gauges) seenTopic(topic string) { g.topics.Add(topic) }

func (g *gauges) observe(ctx context.Context, o metric.Observer) error {
	g.mu.Lock()
	lister, ob, scheds := g.lister, g.outbox, slices.Clone(g.scheds)
	g.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, ReadTimeout)
	defer cancel()
	if lister != nil {
		g.observeKeys(ctx, o, lister)
	}
	if ob != nil {
		g.observeOutbox(ctx, o, ob)
	}
	unix := func(t time.Time) float64 {
		if t.IsZero() {
			return 0
		}
		return float64(t.UnixNano()) / 1e9
	}
	for _, s := range scheds {
		for _, j := range s.Status().Jobs {
			job := metric.WithAttributes(KeyJob.String(j.Job))
			o.ObserveFloat64(g.lastSuccess, unix(j.LastSuccess), job)
			if !j.NextDue.IsZero() {
				o.ObserveFloat64(g.nextDue, unix(j.NextDue), job)
			}
		}
	}
	return nil
}

// observeKeys lists only the records that are not settled, one status at
// a time, as package prom does.
func (g *gauges) observeKeys(ctx context.Context, o metric.Observer, l idemstore.Lister) {
	counts, err := gauge.Keys(ctx, l)
	if err != nil {
		o.ObserveInt64(g.ledgerUp, 0)
		return
	}
	o.ObserveInt64(g.ledgerUp, 1)
	for _, job := range g.jobs.Jobs(counts) {
		for _, label := range gauge.KeyStatuses {
			o.ObserveInt64(g.keys, counts[job][label], metric.WithAttributes(KeyJob.String(job), KeyStatus.String(label)))
		}
	}
}

func (g *gauges) observeOutbox(ctx context.Context, o metric.Observer, s OutboxSource) {
	stats, err := s.OutboxStats(ctx)
	if err != nil {
		o.ObserveInt64(g.outboxUp, 0)
		return
	}
	o.ObserveInt64(g.outboxUp, 1)
	for _, tp := range gauge.Topics(stats, &g.topics, time.Now()) {
		topic := KeyTopic.String(tp.Topic)
		for _, m := range tp.Messages {
			o.ObserveInt64(g.outboxMessages, m.N, metric.WithAttributes(topic, KeyStatus.String(m.Status)))
		}
		o.ObserveFloat64(g.outboxAge, tp.OldestAge, metric.WithAttributes(topic))
	}
}
