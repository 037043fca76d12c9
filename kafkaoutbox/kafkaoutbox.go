// Package kafkaoutbox is an outbox [outbox.Deliverer] that produces each
// message to Kafka with franz-go: a module of its own, so that idem's core
// does not depend on a Kafka client.
//
//	d, err := kafkaoutbox.FromURL("kafka://broker1:9092,broker2:9092/?topic_prefix=orders.")
//	defer d.Close()
//	err = outbox.Relay(ctx, ledger, d)
//
// Each message is one record: its key is the message's outbox topic (the
// topic is what orders messages, so every message of a topic goes to the
// same partition), its value the payload, its headers the message's
// headers plus Idem-Message-Id (the message's id), Idem-Topic and
// Idem-Attempt. The producer is idempotent and waits for the acks of all
// in-sync replicas (franz-go's defaults, which [FromURL] keeps and [New]
// checks nothing of: keep them on your client). Deliver returns only when
// the record is acknowledged; the relay hands out a topic's next message
// only after that, so each partition holds a topic's messages in the
// order their transactions committed.
//
// # What the consumer sees after a relay crash
//
// At least once: a relay that dies after Kafka acknowledged a record and
// before the ledger marked the message delivered produces it again (after
// its lease), as a new record with the same Idem-Message-Id header. The
// idempotent producer removes only the duplicates of its own retries
// within one producer session; a new relay process is a new producer, and
// Kafka stores its copy. A consumer that must apply a message once
// dedupes by the Idem-Message-Id header. The first copy of each message
// of a topic arrives in order (a re-sent copy comes after the original,
// and before the topic's next message).
//
// What it does NOT promise: exactly once, or order across topics (they may
// share a partition, or not). Kafka's transactions are not used: the
// ledger, not Kafka, decides whether a message was sent. The Kafka topic
// must exist unless the brokers create topics on first use.
package kafkaoutbox

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/outbox"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// The headers Deliver sets on every record, besides the message's own.
const (
	// HeaderMessageID is the message's id: the key a consumer dedupes by.
	HeaderMessageID = "Idem-Message-Id"
	// HeaderTopic is the message's outbox topic (also the record's key).
	HeaderTopic = "Idem-Topic"
	// HeaderAttempt is the delivery's attempt (1 for the first).
	HeaderAttempt = "Idem-Attempt"
)

// Deliverer produces outbox messages to Kafka: an [outbox.Deliverer].
// Make one with [New] or [FromURL]; it is safe for concurrent use (a relay
// with [outbox.WithConcurrency]).
type Deliverer struct {
	cl     *kgo.Client
	own    bool // FromURL's client, closed by Close
	topic  string
	prefix string
}

// An Option configures a [Deliverer].
type Option func(*Deliverer)

// WithTopic produces every message to the Kafka topic name (keyed by its
// outbox topic). It wins over [WithTopicPrefix].
func WithTopic(name string) Option { return func(d *Deliverer) { d.topic = name } }

// WithTopicPrefix produces a message of outbox topic T to the Kafka topic
// prefix+T (default: T itself). A name that is no valid Kafka topic name
// (at most 249 of a-z, A-Z, 0-9, '.', '_' and '-', not "." or "..") is an
// [idem.Permanent] failure: the message parks.
func WithTopicPrefix(prefix string) Option { return func(d *Deliverer) { d.prefix = prefix } }

// New returns a Deliverer that produces with cl. Keep cl's producer
// idempotent and its acks at all in-sync replicas (franz-go's defaults):
// the order and the loss promises rest on them. Close does not close cl.
func New(cl *kgo.Client, opts ...Option) *Deliverer {
	if cl == nil {
		panic("kafkaoutbox: New needs a client")
	}
	d := &Deliverer{cl: cl}
	for _, o := range opts {
		o(d)
	}
	return d
}

// FromURL returns a Deliverer with a client of its own (Close closes it)
// for the brokers of rawURL: kafka://HOST:PORT[,HOST:PORT...]/ with these
// query parameters, both optional:
//
//	topic=NAME            every message goes to this Kafka topic (WithTopic)
//	topic_prefix=PREFIX   a message of topic T goes to PREFIX+T (WithTopicPrefix)
//
// The client is idempotent, waits for the acks of all in-sync replicas and
// retries a record until the delivery's deadline (the relay's lease). It
// connects lazily: an unreachable broker fails the deliveries, not
// FromURL. Another scheme, a path, or another query parameter is an error.
// No TLS or SASL: for those, make the client yourself and use [New].
func FromURL(rawURL string) (*Deliverer, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("kafkaoutbox: %w", err)
	}
	if u.Scheme != "kafka" || u.Host == "" || u.User != nil || (u.Path != "" && u.Path != "/") || u.Fragment != "" {
		return nil, fmt.Errorf("kafkaoutbox: %q: want kafka://HOST:PORT[,HOST:PORT...]/?topic_prefix=PREFIX (or ?topic=NAME)", rawURL)
	}
	var opts []Option
	for k, vs := range u.Query() {
		v := vs[len(vs)-1]
		switch k {
		case "topic":
			opts = append(opts, WithTopic(v))
		case "topic_prefix":
			opts = append(opts, WithTopicPrefix(v))
		default:
			return nil, fmt.Errorf("kafkaoutbox: %q: unknown parameter %q (want topic, topic_prefix)", rawURL, k)
		}
	}
	seeds := strings.Split(u.Host, ",")
	for _, s := range seeds {
		if _, port, ok := strings.Cut(s, ":"); !ok || port == "" {
			return nil, fmt.Errorf("kafkaoutbox: %q: broker %q needs HOST:PORT", rawURL, s)
		}
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.ClientID("idem-outbox-relay"),
		kgo.RequiredAcks(kgo.AllISRAcks()), kgo.ProducerLinger(0))
	if err != nil {
		return nil, fmt.Errorf("kafkaoutbox: %q: %w", rawURL, err)
	}
	d := New(cl, opts...)
	d.own = true
	return d, nil
}

// Close closes the client that [FromURL] made (nothing for [New]).
func (d *Deliverer) Close() error {
	if d.own {
		d.cl.Close()
	}
	return nil
}

// Topic is the Kafka topic that a message of outbox topic goes to.
func (d *Deliverer) Topic(topic string) string {
	if d.topic != "" {
		return d.topic
	}
	return d.prefix + topic
}

// Deliver produces m as one record (key: m.Topic) and waits for its ack
// (within ctx: the relay's lease). The message's headers go as record
// headers, then Idem-Message-Id, Idem-Topic and Idem-Attempt. A Kafka
// topic name that is not valid, or a record larger than the topic's
// limit, is an [idem.Permanent] failure; anything else (an unknown topic,
// no ack in time, the brokers down) fails the attempt, retried after the
// relay's backoff.
func (d *Deliverer) Deliver(ctx context.Context, m outbox.Delivery) error {
	topic := d.Topic(m.Topic)
	if err := checkTopic(topic); err != nil {
		return idem.Permanent(fmt.Errorf("kafkaoutbox: message %s (topic %q): %w", m.ID, m.Topic, err))
	}
	rec := &kgo.Record{Topic: topic, Key: []byte(m.Topic), Value: m.Payload}
	for k, v := range m.Headers {
		switch k {
		case HeaderMessageID, HeaderTopic, HeaderAttempt:
		default:
			rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: k, Value: []byte(v)})
		}
	}
	rec.Headers = append(rec.Headers,
		kgo.RecordHeader{Key: HeaderMessageID, Value: []byte(m.ID)},
		kgo.RecordHeader{Key: HeaderTopic, Value: []byte(m.Topic)},
		kgo.RecordHeader{Key: HeaderAttempt, Value: []byte(strconv.Itoa(m.Attempt))})
	if err := d.cl.ProduceSync(ctx, rec).FirstErr(); err != nil {
		err = fmt.Errorf("kafkaoutbox: produce %s to %s: %w", m.ID, topic, err)
		if errors.Is(err, kerr.MessageTooLarge) || errors.Is(err, kerr.RecordListTooLarge) || errors.Is(err, kerr.InvalidTopicException) {
			return idem.Permanent(err)
		}
		return err
	}
	return nil
}

// checkTopic reports why name is no valid Kafka topic name, or nil.
func checkTopic(name string) error {
	switch {
	case name == "":
		return errors.New("empty Kafka topic name")
	case name == "." || name == "..":
		return fmt.Errorf("kafka topic name %q is not allowed", name)
	case len(name) > 249:
		return fmt.Errorf("kafka topic name %.40q... is %d bytes, more than 249", name, len(name))
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-') {
			return fmt.Errorf("kafka topic name %q has %q (only a-z, A-Z, 0-9, '.', '_' and '-' are allowed)", name, r)
		}
	}
	return nil
}
