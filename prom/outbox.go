package prom

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/idemgo/idem/idemstore"
	"github.com/idemgo/idem/internal/gauge"
	"github.com/idemgo/idem/outbox"
	"github.com/prometheus/client_golang/prometheus"
)

// The outbox metrics. From the relay ([Outbox.RelayOption], or
// [Outbox.ObserveDelivery] in your own idem.OnDelivery):
//
//	idem_outbox_deliveries_total{topic,outcome}  counter  delivery attempts by how they ended: delivered, retrying, parked, superseded
//
// From the store ([Outbox.Watch]), read at scrape time:
//
//	idem_outbox_messages{topic,status}           gauge    messages by status: pending (the backlog), failing (pending after a failed attempt), delivered (not pruned yet), parked
//	idem_outbox_oldest_pending_age_seconds{topic} gauge   how long the oldest pending message of the topic has waited since its transaction queued it; 0 when none is pending
//	idem_outbox_up                               gauge    1 if the last read of the outbox succeeded, 0 if it failed
//
// Alert on idem_outbox_messages{status="parked"} > 0 (a person must retry
// or drop a message: idem outbox ls --status parked) and on
// idem_outbox_oldest_pending_age_seconds above what the receiver may wait
// (the relay is down, or the receiver has been failing for that long).

// The statuses of idem_outbox_messages.
const (
	OutboxPending   = gauge.OutboxPending
	OutboxFailing   = gauge.OutboxFailing
	OutboxDelivered = gauge.OutboxDelivered
	OutboxParked    = gauge.OutboxParked
)

// Outbox records the transactional outbox's relay and backlog as
// Prometheus metrics. Create it with [NewOutbox]; it is safe for
// concurrent use.
type Outbox struct {
	deliveries *prometheus.CounterVec
	backlog    *outboxCollector
}

// NewOutbox creates the outbox metrics and registers them with reg
// (prometheus.DefaultRegisterer if nil). Of opts, WithConstLabels and
// WithScrapeTimeout apply.
func NewOutbox(reg prometheus.Registerer, opts ...Option) (*Outbox, error) {
	c := config{scrapeTimeout: DefaultScrapeTimeout}
	for _, o := range opts {
		o(&c)
	}
	if reg == nil {
		reg = prometheus.DefaultRegisterer
	}
	o := &Outbox{
		deliveries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name:        "idem_outbox_deliveries_total",
			Help:        "Delivery attempts of the outbox relay, by topic and how they ended (delivered, retrying, parked, superseded).",
			ConstLabels: c.constLabels,
		}, []string{"topic", "outcome"}),
		backlog: newOutboxCollector(c.constLabels, c.scrapeTimeout),
	}
	for _, col := range []prometheus.Collector{o.deliveries, o.backlog} {
		if err := reg.Register(col); err != nil {
			return nil, fmt.Errorf("idem/prom: register: %w", err)
		}
	}
	return o, nil
}

// ObserveDelivery records one delivery attempt. It is the function to
// give idem.OnDelivery; [Outbox.RelayOption] does that.
func (o *Outbox) ObserveDelivery(r outbox.DeliveryResult) {
	o.backlog.seen(r.Topic)
	o.deliveries.WithLabelValues(r.Topic, r.Outcome.String()).Inc()
}

// RelayOption returns a relay option that records every delivery attempt:
// outbox.OnDelivery(o.ObserveDelivery). Pass it to idem.Relay, idem.RelayOnce
// or Scheduler.AddRelay. (A relay has one OnDelivery: to do more in it,
// call ObserveDelivery from your own.)
func (o *Outbox) RelayOption() outbox.Option { return outbox.OnDelivery(o.ObserveDelivery) }

// Watch makes idem_outbox_messages and idem_outbox_oldest_pending_age_seconds
// report the outbox of s (a Ledger or a Postgres ledger), read at every
// scrape. A later call replaces s; nil stops reporting.
func (o *Outbox) Watch(s OutboxSource) { o.backlog.setStore(s) }

// OutboxSource is a store with an outbox, as [Outbox.Watch] reads it:
// idem.Ledger and the Postgres ledgers are.
type OutboxSource interface {
	// OutboxStats returns the outbox's counts and oldest pending message
	// per topic.
	OutboxStats(ctx context.Context) ([]idemstore.OutboxTopicStats, error)
}

// outboxCollector computes the outbox gauges from the store's stats at
// scrape time.
type outboxCollector struct {
	messages, oldest, up *prometheus.Desc
	timeout              time.Duration
	now                  func() time.Time

	mu     sync.Mutex
	store  OutboxSource
	topics gauge.Seen // topics seen, reported at 0 when they have no messages left
}

func newOutboxCollector(constLabels prometheus.Labels, timeout time.Duration) *outboxCollector {
	return &outboxCollector{
		messages: prometheus.NewDesc("idem_outbox_messages",
			"Outbox messages by topic and status, read at scrape time: pending (the backlog), failing (pending after a failed attempt), delivered (not pruned yet), parked (awaiting a person's retry or drop).",
			[]string{"topic", "status"}, constLabels),
		oldest: prometheus.NewDesc("idem_outbox_oldest_pending_age_seconds",
			"How long the oldest pending message of the topic has waited since its transaction queued it, in seconds; 0 when none is pending.",
			[]string{"topic"}, constLabels),
		up: prometheus.NewDesc("idem_outbox_up",
			"1 if the last read of the outbox succeeded, 0 if it failed.",
			nil, constLabels),
		timeout: timeout,
		now:     time.Now,
	}
}

func (c *outboxCollector) setStore(s OutboxSource) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.store = s
}

func (c *outboxCollector) seen(topic string) { c.topics.Add(topic) }

// Describe implements prometheus.Collector.
func (c *outboxCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.messages
	ch <- c.oldest
	ch <- c.up
}

// Collect implements prometheus.Collector: one OutboxStats call.
func (c *outboxCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	s := c.store
	c.mu.Unlock()
	if s == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	stats, err := s.OutboxStats(ctx)
	if err != nil {
		ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, 0)
		return
	}
	ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, 1)
	for _, tp := range gauge.Topics(stats, &c.topics, c.now()) {
		for _, m := range tp.Messages {
			ch <- prometheus.MustNewConstMetric(c.messages, prometheus.GaugeValue, float64(m.N), tp.Topic, m.Status)
		}
		ch <- prometheus.MustNewConstMetric(c.oldest, prometheus.GaugeValue, tp.OldestAge, tp.Topic)
	}
}
