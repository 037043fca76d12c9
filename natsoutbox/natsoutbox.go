// Package natsoutbox is an outbox [outbox.Deliverer] that publishes each
// message to NATS JetStream: a module of its own, so that idem's core
// does not depend on the NATS client.
//
//	d, err := natsoutbox.FromURL("nats://127.0.0.1:4222/?stream=ORDERS&subject_prefix=orders.")
//	defer d.Close()
//	err = outbox.Relay(ctx, ledger, d)
//
// Each message is published to the subject prefix + topic with the
// header Nats-Msg-Id set to the message's id, and Deliver returns only
// when the stream acknowledged it (the publish ack): then the message is
// stored in the stream. The relay hands out a topic's next message only
// after that, so the stream holds each topic's messages in the order their
// transactions committed.
//
// # What the consumer sees after a relay crash
//
// A relay that dies after the stream stored a message and before the
// ledger marked it delivered publishes it again (after its lease), with
// the same Nats-Msg-Id. The stream drops that copy when it arrives within
// the stream's duplicate window (StreamConfig.Duplicates; 2 minutes unless
// set): the consumer sees the message once, and the ack says Duplicate
// (Deliver counts it delivered). The window is kept across a restart of
// the server.
//
// What it does NOT promise: exactly once beyond the window. A copy that
// arrives after the window (the relay stayed down longer than the window
// minus its lease, or a message failed for longer than that and an earlier
// attempt had in fact been stored) is stored again: a consumer that must
// not apply a message twice dedupes by Nats-Msg-Id too. Set the window
// longer than the relay's lease ([outbox.WithLease], 1 minute by default)
// plus the longest relay outage you accept duplicates after. Nor does it
// promise anything about the consumers: JetStream redelivers to a
// consumer whose ack it did not get (the consumer's own at least once).
// The stream must exist, with subjects that cover the prefix: this package
// creates nothing.
package natsoutbox

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/outbox"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// The headers Deliver sets on every message, besides the message's own.
const (
	// HeaderMsgID is JetStream's deduplication header: the message's id.
	HeaderMsgID = jetstream.MsgIDHeader
	// HeaderTopic is the message's outbox topic.
	HeaderTopic = "Idem-Topic"
	// HeaderAttempt is the delivery's attempt (1 for the first).
	HeaderAttempt = "Idem-Attempt"
)

// Deliverer publishes outbox messages to JetStream: an [outbox.Deliverer].
// Make one with [New] or [FromURL]; it is safe for concurrent use (a relay
// with [outbox.WithConcurrency]).
type Deliverer struct {
	js     jetstream.JetStream
	nc     *nats.Conn // FromURL's own connection, closed by Close; nil for New
	prefix string
	stream string
}

// An Option configures a [Deliverer].
type Option func(*Deliverer)

// WithSubjectPrefix publishes a message of topic T to the subject
// prefix+T (default: T itself). A subject of a topic that is no valid NATS
// subject to publish to (empty tokens, white space, a wildcard token * or
// >) is an [idem.Permanent] failure: the message parks.
func WithSubjectPrefix(prefix string) Option {
	return func(d *Deliverer) { d.prefix = prefix }
}

// WithStream makes every publish expect the stream named name
// (Nats-Expected-Stream): a subject that is stored by another stream fails
// the attempt instead of landing there. By default any stream that covers
// the subject takes it.
func WithStream(name string) Option {
	return func(d *Deliverer) { d.stream = name }
}

// New returns a Deliverer that publishes with js. Close does not close
// js's connection: it is the caller's.
func New(js jetstream.JetStream, opts ...Option) *Deliverer {
	if js == nil {
		panic("natsoutbox: New needs a JetStream")
	}
	d := &Deliverer{js: js}
	for _, o := range opts {
		o(d)
	}
	return d
}

// FromURL connects to the NATS server of rawURL and returns a Deliverer
// that publishes through that connection (Close closes it). The URL is
// nats://[USER:PASSWORD@]HOST:PORT/ with these query parameters, all
// optional:
//
//	stream=NAME           every publish expects this stream (WithStream)
//	subject_prefix=PREFIX subjects are PREFIX+topic (WithSubjectPrefix)
//
// The first connection must succeed (else an error); after that the
// connection reconnects for as long as the Deliverer lives, and a publish
// made meanwhile waits, within its delivery's deadline, for the server.
// Another scheme, a path, or another query parameter is an error.
func FromURL(rawURL string) (*Deliverer, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("natsoutbox: %w", err)
	}
	if u.Scheme != "nats" || u.Host == "" || (u.Path != "" && u.Path != "/") || u.Fragment != "" {
		return nil, fmt.Errorf("natsoutbox: %q: want nats://[USER:PASSWORD@]HOST:PORT/?stream=NAME&subject_prefix=PREFIX", redact(u))
	}
	var opts []Option
	for k, vs := range u.Query() {
		v := vs[len(vs)-1]
		switch k {
		case "stream":
			opts = append(opts, WithStream(v))
		case "subject_prefix":
			opts = append(opts, WithSubjectPrefix(v))
		default:
			return nil, fmt.Errorf("natsoutbox: %q: unknown parameter %q (want stream, subject_prefix)", redact(u), k)
		}
	}
	server := url.URL{Scheme: u.Scheme, User: u.User, Host: u.Host}
	nc, err := nats.Connect(server.String(), nats.Name("idem outbox relay"), nats.MaxReconnects(-1),
		nats.ReconnectWait(250*time.Millisecond))
	if err != nil {
		return nil, fmt.Errorf("natsoutbox: connect to %s: %w", redact(u), err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("natsoutbox: %w", err)
	}
	d := New(js, opts...)
	d.nc = nc
	return d, nil
}

// redact is u without its password, for messages.
func redact(u *url.URL) string { return u.Redacted() }

// Close closes the connection that [FromURL] opened (nothing for [New]).
func (d *Deliverer) Close() error {
	if d.nc != nil {
		d.nc.Close()
	}
	return nil
}

// Subject is the subject that a message of topic is published to.
func (d *Deliverer) Subject(topic string) string { return d.prefix + topic }

// Deliver publishes m to its subject with Nats-Msg-Id set to m.ID and
// waits for the stream's ack (within ctx: the relay's lease). The
// message's headers go as NATS headers, then Nats-Msg-Id, Idem-Topic and
// Idem-Attempt (which replace headers of those names). An ack that says
// the stream already had the id (a re-send within the duplicate window)
// is a delivery. A subject that cannot be published to, or a message
// larger than the server's max_payload, is an [idem.Permanent] failure;
// anything else (no stream for the subject, no ack in time, the server
// down) fails the attempt, retried after the relay's backoff.
func (d *Deliverer) Deliver(ctx context.Context, m outbox.Delivery) error {
	subj := d.Subject(m.Topic)
	if err := checkSubject(subj); err != nil {
		return idem.Permanent(fmt.Errorf("natsoutbox: message %s (topic %q): %w", m.ID, m.Topic, err))
	}
	msg := nats.NewMsg(subj)
	msg.Data = m.Payload
	for k, v := range m.Headers {
		msg.Header.Set(k, v)
	}
	msg.Header.Set(HeaderTopic, m.Topic)
	msg.Header.Set(HeaderAttempt, strconv.Itoa(m.Attempt))
	opts := []jetstream.PublishOpt{jetstream.WithMsgID(m.ID)}
	if d.stream != "" {
		opts = append(opts, jetstream.WithExpectStream(d.stream))
	}
	if _, err := d.js.PublishMsg(ctx, msg, opts...); err != nil {
		err = fmt.Errorf("natsoutbox: publish %s to %s: %w", m.ID, subj, err)
		if errors.Is(err, nats.ErrMaxPayload) || errors.Is(err, nats.ErrBadSubject) {
			return idem.Permanent(err)
		}
		return err
	}
	return nil
}

// checkSubject reports why subj cannot be published to, or nil.
func checkSubject(subj string) error {
	if subj == "" {
		return errors.New("empty subject")
	}
	for tok := range strings.SplitSeq(subj, ".") {
		switch {
		case tok == "":
			return fmt.Errorf("subject %q has an empty token", subj)
		case tok == "*" || tok == ">":
			return fmt.Errorf("subject %q has a wildcard token", subj)
		case strings.ContainsFunc(tok, unicode.IsSpace):
			return fmt.Errorf("subject %q has white space", subj)
		}
	}
	return nil
}
