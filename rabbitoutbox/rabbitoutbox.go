// Package rabbitoutbox is an outbox [outbox.Deliverer] that publishes the
// outbox's messages to RabbitMQ (AMQP 0-9-1, github.com/rabbitmq/amqp091-go),
// in a module of its own so that idem's core needs no AMQP client.
//
// A message counts as delivered (the relay marks it so) only when the
// broker confirmed it (publisher confirms) and did not return it: it is
// published mandatory, so a message that no queue takes comes back
// (basic.return) and the attempt fails, retried after the relay's backoff
// like a webhook receiver that is down. It is published persistent
// (delivery mode 2), with its AMQP message-id set to the outbox message's
// id ([outbox.Delivery.ID]), to the exchange given (default: the default
// exchange, where the routing key names the queue) with the message's
// topic as its routing key (unless [WithRoutingKey] fixes one).
//
// What the receiver sees: each message at least once. After a relay
// crash (or a lost confirm, a broker restart, a lease that ran out) the
// same message is published again, with the same message-id: a consumer
// dedupes by message-id. Within a queue, the first arrival of each message
// of a topic comes in the order the messages were put: the relay publishes
// a topic's next message only after the broker confirmed the one before.
//
// What it does NOT promise: exactly once (dedupe by message-id); that a
// duplicate arrives right after its first copy (a copy of an earlier
// message may arrive after later ones of its topic); the order of
// messages in a queue that a consumer rejects or requeues, or across
// several queues or consumers; that the message survives a broker crash
// when the queue is not durable or not replicated (the broker confirms a
// message routed to a transient queue as soon as it is enqueued, and the
// relay has then marked it delivered); that every queue you meant it for
// took it (mandatory fails only when no queue did; an exchange with an
// alternate exchange takes everything). It declares no exchange, queue or
// binding: set up the topology before the relay runs.
package rabbitoutbox

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/idemgo/idem/outbox"
	amqp "github.com/rabbitmq/amqp091-go"
)

// ErrReturned: the broker returned a message published mandatory: no queue
// took it (no binding matched its routing key, or the queue it named does
// not exist). The attempt failed; the relay retries it after its backoff.
var ErrReturned = errors.New("rabbitoutbox: message returned unroutable")

// ErrNacked: the broker nacked the message (basic.nack): it did not take
// responsibility for it (an internal error, a queue that rejects publishes
// when full). The attempt failed.
var ErrNacked = errors.New("rabbitoutbox: message nacked by the broker")

// ErrClosed: [Publisher.Deliver] or [Publisher.Connect] after
// [Publisher.Close].
var ErrClosed = errors.New("rabbitoutbox: publisher closed")

// Publisher publishes outbox messages to RabbitMQ: an [outbox.Deliverer].
// It holds one connection, dialled when first needed and again after it
// is lost (a broker restart fails the deliveries under way, which the
// relay retries), and one channel in confirm mode per delivery in flight
// ([outbox.WithConcurrency] runs several at once). Its methods may be
// called from several goroutines at once.
type Publisher struct {
	url      string // the connection's: what amqp091 dials
	safe     string // url without its password, for errors
	exchange string
	key      string // fixed routing key; "" = the message's topic
	config   amqp.Config

	mu     sync.Mutex
	conn   *amqp.Connection
	idle   []*pubChannel // channels of conn in confirm mode, free
	closed bool
}

// pubChannel is a channel in confirm mode with at most one publish in
// flight, so that a return on it is that publish's.
type pubChannel struct {
	ch      *amqp.Channel
	conn    *amqp.Connection
	returns chan amqp.Return
	closes  chan *amqp.Error
}

// An Option configures [New].
type Option func(*Publisher) error

// WithExchange publishes to the exchange name (default "": the default
// exchange, which routes a message to the queue its routing key names).
func WithExchange(name string) Option {
	return func(p *Publisher) error { p.exchange = name; return nil }
}

// WithRoutingKey publishes every message with routing key key instead of
// its topic. An empty key is an error.
func WithRoutingKey(key string) Option {
	return func(p *Publisher) error {
		if key == "" {
			return errors.New("rabbitoutbox.WithRoutingKey: empty key (leave the option out to route by topic)")
		}
		p.key = key
		return nil
	}
}

// WithConfig dials with cfg (amqp091's: TLS, SASL, heartbeat, a custom
// dialer) instead of what the URL gives. Its Vhost, when empty, is the URL's.
func WithConfig(cfg amqp.Config) Option {
	return func(p *Publisher) error { p.config = cfg; return nil }
}

// New returns a Publisher to the broker at url (amqp://user:pass@host:port/vhost
// or amqps://…, as amqp091.ParseURI reads it). It does not connect: the
// first delivery (or [Publisher.Connect]) does. An invalid URL or option is
// an error.
func New(url string, opts ...Option) (*Publisher, error) {
	uri, err := amqp.ParseURI(url)
	if err != nil {
		return nil, fmt.Errorf("rabbitoutbox: URL %s: %w", redact(url), hideURL(err))
	}
	p := &Publisher{url: url, safe: redact(url)}
	p.config = amqp.Config{Vhost: uri.Vhost, Heartbeat: 10 * time.Second, Locale: "en_US"}
	for _, o := range opts {
		if o == nil {
			return nil, errors.New("rabbitoutbox: a nil option")
		}
		if err := o(p); err != nil {
			return nil, err
		}
	}
	if p.config.Vhost == "" {
		p.config.Vhost = uri.Vhost
	}
	if p.config.Properties == nil {
		p.config.Properties = amqp.NewConnectionProperties()
		p.config.Properties.SetClientConnectionName("idem outbox relay")
	}
	return p, nil
}

// urlParams are the query parameters FromURL reads itself; every other one
// must be one amqp091 reads.
var (
	urlParams   = []string{"exchange", "routing_key"}
	amqpParams  = []string{"certfile", "keyfile", "cacertfile", "server_name_indication", "auth_mechanism", "heartbeat", "connection_timeout", "channel_max"}
	urlExamples = "amqp://user:pass@host:5672/vhost?exchange=events"
)

// FromURL returns a Publisher from one URL, the form of
// 'idem outbox relay --to': amqp://user:pass@host:port/vhost (or amqps://)
// with the query parameters exchange (default: the default exchange) and
// routing_key (default: each message's topic), besides those amqp091 reads
// (heartbeat, connection_timeout, channel_max, auth_mechanism, and TLS's
// certfile, keyfile, cacertfile, server_name_indication). An unknown
// parameter is an error (a misspelt exchange must not publish to the
// default one). The vhost is the path, escaped ("/" is %2F; none is "/").
func FromURL(rawURL string) (*Publisher, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("rabbitoutbox: URL %s: %w", redact(rawURL), hideURL(err))
	}
	if u.Scheme != "amqp" && u.Scheme != "amqps" {
		return nil, fmt.Errorf("rabbitoutbox: URL %s: want amqp:// or amqps:// (%s)", redact(rawURL), urlExamples)
	}
	q := u.Query()
	var opts []Option
	for name, vs := range q {
		if !slices.Contains(urlParams, name) && !slices.Contains(amqpParams, name) {
			return nil, fmt.Errorf("rabbitoutbox: URL %s: unknown parameter %q (known: %s)", redact(rawURL), name,
				strings.Join(append(slices.Clone(urlParams), amqpParams...), ", "))
		}
		if len(vs) > 1 && name != "auth_mechanism" {
			return nil, fmt.Errorf("rabbitoutbox: URL %s: parameter %q given %d times", redact(rawURL), name, len(vs))
		}
	}
	if q.Has("exchange") {
		opts = append(opts, WithExchange(q.Get("exchange")))
	}
	if q.Has("routing_key") {
		opts = append(opts, WithRoutingKey(q.Get("routing_key")))
	}
	for _, name := range urlParams {
		q.Del(name)
	}
	u.RawQuery = q.Encode()
	return New(u.String(), opts...)
}

// String describes the publisher's target, without the password.
func (p *Publisher) String() string {
	ex := p.exchange
	if ex == "" {
		ex = "(default)"
	}
	key := "the topic"
	if p.key != "" {
		key = fmt.Sprintf("%q", p.key)
	}
	return fmt.Sprintf("%s exchange %s, routing key %s", p.safe, ex, key)
}

// Connect dials the broker now, if the publisher has no connection: a
// relay can check its settings (address, credentials, vhost) before it
// starts. Deliver dials by itself when needed.
func (p *Publisher) Connect(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	_, err := p.connLocked(ctx)
	return err
}

// Close closes the connection; a Deliver under way fails. Deliver and
// Connect then return [ErrClosed].
func (p *Publisher) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	p.idle = nil
	if p.conn == nil {
		return nil
	}
	err := p.conn.CloseDeadline(time.Now().Add(10 * time.Second))
	p.conn = nil
	if errors.Is(err, amqp.ErrClosed) {
		err = nil
	}
	return err
}

// connLocked returns the open connection, dialling it if need be. p.mu is
// held.
func (p *Publisher) connLocked(ctx context.Context) (*amqp.Connection, error) {
	if p.closed {
		return nil, ErrClosed
	}
	if p.conn != nil && !p.conn.IsClosed() {
		return p.conn, nil
	}
	p.conn, p.idle = nil, nil
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	cfg := p.config
	if cfg.Dial == nil {
		timeout := 30 * time.Second
		if dl, ok := ctx.Deadline(); ok {
			timeout = max(min(timeout, time.Until(dl)), time.Millisecond)
		}
		cfg.Dial = amqp.DefaultDial(timeout)
	}
	conn, err := amqp.DialConfig(p.url, cfg)
	if err != nil {
		return nil, fmt.Errorf("rabbitoutbox: connect to %s: %w", p.safe, err)
	}
	p.conn = conn
	return conn, nil
}

// channel returns a free channel in confirm mode, opening one (and the
// connection) if none is free.
func (p *Publisher) channel(ctx context.Context) (*pubChannel, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	conn, err := p.connLocked(ctx)
	if err != nil {
		return nil, err
	}
	for len(p.idle) > 0 {
		pc := p.idle[len(p.idle)-1]
		p.idle = p.idle[:len(p.idle)-1]
		if !pc.ch.IsClosed() {
			return pc, nil
		}
	}
	ch, err := conn.Channel()
	if err != nil {
		return nil, fmt.Errorf("rabbitoutbox: open a channel to %s: %w", p.safe, err)
	}
	if err := ch.Confirm(false); err != nil {
		_ = ch.Close()
		return nil, fmt.Errorf("rabbitoutbox: put a channel to %s in confirm mode: %w", p.safe, err)
	}
	// The buffer holds a return until Deliver reads it: one publish is in
	// flight on the channel at a time, and the reader goroutine hands the
	// return over before the ack that follows it.
	pc := &pubChannel{ch: ch, conn: conn, returns: ch.NotifyReturn(make(chan amqp.Return, 4)),
		closes: ch.NotifyClose(make(chan *amqp.Error, 1))}
	return pc, nil
}

// release gives pc back for the next delivery, or closes it when it is no
// longer usable (ok false: a publish on it may still be answered). The
// close waits for the broker's answer, which a broker that blocks the
// connection (a memory or disk alarm) does not send: it is not waited for
// here, so that Deliver returns by its deadline.
func (p *Publisher) release(pc *pubChannel, ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if ok && !p.closed && pc.conn == p.conn && !pc.ch.IsClosed() {
		p.idle = append(p.idle, pc)
		return
	}
	go func() { _ = pc.ch.Close() }()
}

// Deliver publishes d (mandatory, persistent, message-id d.ID) and waits for
// the broker's confirm: nil when the broker confirmed it and did not return
// it. A message returned (no queue took it) fails with an error matching
// [ErrReturned]; a nack, with one matching [ErrNacked]; a lost connection or
// channel (a broker restart, a missing exchange), ctx's end (the relay's
// lease), with an error saying so. The relay retries each after its
// backoff; none is [github.com/idemgo/idem.Permanent].
//
// The message's headers (with the relay's traceparent and tracestate, when
// traced) go into the AMQP headers table as strings, with idem-topic and
// idem-attempt set (over stored headers of those names); a Content-Type
// header (any case) sets the content type property instead (default
// application/octet-stream).
func (p *Publisher) Deliver(ctx context.Context, d outbox.Delivery) error {
	pc, err := p.channel(ctx)
	if err != nil {
		return err
	}
	key := p.key
	if key == "" {
		key = d.Topic
	}
	msg := amqp.Publishing{MessageId: d.ID, DeliveryMode: amqp.Persistent, Body: d.Payload, ContentType: "application/octet-stream",
		Headers: amqp.Table{}}
	for k, v := range d.Headers {
		if strings.EqualFold(k, "content-type") {
			msg.ContentType = v
			continue
		}
		msg.Headers[k] = v
	}
	msg.Headers["idem-topic"], msg.Headers["idem-attempt"] = d.Topic, int64(d.Attempt) // the relay's, not a stored header's
	dc, err := pc.ch.PublishWithDeferredConfirmWithContext(ctx, p.exchange, key, true, false, msg)
	if err != nil {
		p.release(pc, false)
		return fmt.Errorf("rabbitoutbox: publish %s to %s: %w", d.ID, p.where(key), err)
	}
	select {
	case <-dc.Done():
	case <-ctx.Done():
		p.release(pc, false) // its confirm (or return) may still come
		return fmt.Errorf("rabbitoutbox: publish %s to %s: no confirm from the broker before the delivery's deadline: %w", d.ID, p.where(key), context.Cause(ctx))
	}
	if !dc.Acked() {
		// A channel or connection that closed nacks what it had in flight.
		var why *amqp.Error
		select {
		case why = <-pc.closes:
		default:
		}
		p.release(pc, false)
		if why != nil || pc.ch.IsClosed() {
			return fmt.Errorf("rabbitoutbox: publish %s to %s: the channel closed before the broker confirmed it: %v", d.ID, p.where(key), closeReason(why))
		}
		return fmt.Errorf("%w: %s to %s", ErrNacked, d.ID, p.where(key))
	}
	select {
	case r := <-pc.returns:
		p.release(pc, true)
		if r.MessageId != d.ID {
			// Not this publish's (one is in flight at a time): a broker
			// that broke the protocol. Fail safe.
			return fmt.Errorf("%w: %s to %s: a return for message %q came instead", ErrReturned, d.ID, p.where(key), r.MessageId)
		}
		return fmt.Errorf("%w: %s to %s: %d %s (no queue is bound for this routing key)", ErrReturned, d.ID, p.where(key), r.ReplyCode, r.ReplyText)
	default:
	}
	p.release(pc, true)
	return nil
}

func (p *Publisher) where(key string) string {
	if p.exchange == "" {
		return fmt.Sprintf("%s (default exchange, queue %q)", p.safe, key)
	}
	return fmt.Sprintf("%s exchange %q routing key %q", p.safe, p.exchange, key)
}

func closeReason(e *amqp.Error) string {
	if e == nil {
		return "closed"
	}
	return e.Error()
}

// redact returns rawURL without its password.
func redact(rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil {
		return "(an unparsable URL)"
	}
	return u.Redacted()
}

// hideURL returns err without the URL that net/url's errors quote (with
// its password).
func hideURL(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

var _ outbox.Deliverer = (*Publisher)(nil)
