// Package outbox queues messages in the transaction of a job's body
// (idem.RunTx and the other transactional calls) and delivers them after
// it commits: Put, a Relay that hands them to a Deliverer, and a Webhook
// deliverer (modules github.com/idemgo/idem/natsoutbox and
// github.com/idemgo/idem/kafkaoutbox have deliverers to NATS JetStream and
// Kafka). A message whose transaction committed is delivered at least
// once, in the order of its topic; one whose transaction rolled back
// never is.
package outbox

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/idemgo/idem/idemstore"
	"github.com/idemgo/idem/internal/runctx"
	"github.com/idemgo/idem/internal/storeof"
)

// ErrNoOutbox: [Put] was called where no outbox can take the message:
// outside the body of a RunTx, EachTx or catch-up's RunTx (or a
// Scheduler's AddTx job), with a transaction other than the body's, or on a store that has
// no outbox. The SQLite Ledger and the Postgres ledgers have one; the
// state file and the redis store do not (they share no transaction with
// business data). Nothing was queued.
var ErrNoOutbox = errors.New("idem: no outbox here")

// ErrInvalidMessage: [Put] was given a message it cannot queue (an empty
// topic, a topic or header that is not UTF-8 or has control characters,
// two header names that differ only in case).
// Nothing was queued.
var ErrInvalidMessage = errors.New("idem: invalid outbox message")

// ErrMessageNotFound: an operator's call on the outbox (retry, drop) named
// a message that is not there, or not in a state the call can change.
// Nothing was written.
var ErrMessageNotFound = idemstore.ErrMessageNotFound

// Message is what [Put] queues: a [Relay] hands it to a
// [Deliverer] after the transaction that queued it commits.
type Message struct {
	// Topic orders messages: the relay delivers the messages of one
	// topic one at a time, in the order their transactions committed
	// (and, in one transaction, the order of the Puts). Messages of
	// different topics are independent. Required; at most 200 bytes.
	Topic string
	// Payload is the body, handed to the deliverer as it is.
	Payload []byte
	// Headers are handed to the deliverer (the webhook sends them as HTTP
	// headers). Optional. Names are case-insensitive: two that differ
	// only in case are an error. When the body's context is traced (see
	// [idemstore.Spans]; module github.com/idemgo/idem/otel), Put adds
	// the trace context of the body's attempt (traceparent, tracestate)
	// to the stored headers, unless Headers sets a traceparent (in any
	// case): then the caller's traceparent and tracestate are stored as
	// given, under those lower-case names, and the body's are not added
	// (a tracestate set without a traceparent is replaced by the body's).
	// The message given is not changed. A traced relay hands the
	// deliverer the trace context of its delivery's span instead, a child
	// of the stored one, with the stored tracestate if it is a valid W3C
	// one (cut to 512 characters by the W3C rule), else none: see
	// [idemstore.InjectSpan].
	Headers map[string]string
}

// MaxTopic is the longest [Message.Topic], in bytes.
const MaxTopic = 200

// Put queues msg in the outbox of tx, the transaction of the body that
// ctx belongs to: an idem.RunTx body (or a store's RunTx method's), a
// idem.EachTx item's, a idem.CatchUpTx period's, or a Scheduler's AddTx
// job's. The message commits with the body's business writes and the
// key's done mark, or not at all: a body that fails, or a transaction that
// is rolled back or killed, leaves no message behind, and none is ever
// delivered.
//
// It returns the message's id: the key's request id
// ([idem.Key.RequestID]; in EachTx the item's, [idem.Key.ItemRequestID]), a
// dash and the message's index among the messages this attempt has put so
// far (0, 1, ...). A retried attempt that puts its messages in the same
// order gets the same ids, so a receiver that dedupes by the id applies
// each message once. The relay hands the id to the deliverer (the webhook
// sends it as Idempotency-Key).
//
// Outside such a body, with another transaction than the body's, or on a
// store without an outbox (the state file, redisstore), Put returns an
// error matching [ErrNoOutbox]; an invalid message, [ErrInvalidMessage].
// Either way nothing was queued; return the error from the body so that
// the transaction rolls back.
func Put[Tx any](ctx context.Context, tx Tx, msg Message) (id string, err error) {
	w := runctx.OutboxOf(ctx)
	if w == nil {
		return "", fmt.Errorf("%w: Put outside the body of a RunTx, EachTx or catch-up's RunTx", ErrNoOutbox)
	}
	own, ok := w.Tx.(Tx)
	if !ok || !sameTx(own, tx) {
		return "", fmt.Errorf("%w: Put with a transaction (%T) other than the body's own (%T)", ErrNoOutbox, tx, w.Tx)
	}
	store, ok := w.Store.(idemstore.OutboxTxStore[Tx])
	if !ok {
		return "", fmt.Errorf("%w: store %s has no outbox (the SQLite Ledger and the Postgres ledgers have one)", ErrNoOutbox, storeof.TypeName(w.Store))
	}
	if err := checkMessage(msg); err != nil {
		return "", err
	}
	id = w.NextID()
	// The trace context of the body's attempt, if ctx is traced
	// (idemstore.Spans: module github.com/idemgo/idem/otel), is stored
	// with the message, for the delivery's span and the receiver.
	m := idemstore.OutboxMessage{ID: id, Topic: msg.Topic, Payload: msg.Payload, Headers: idemstore.InjectSpan(ctx, msg.Headers, false),
		Key: w.Key, Item: w.Item, Created: w.Now()}
	if m.Payload == nil {
		m.Payload = []byte{}
	}
	if err := store.PutOutbox(ctx, own, []idemstore.OutboxMessage{m}); err != nil {
		return "", fmt.Errorf("idem: put %s (topic %q) for %s: %w", id, msg.Topic, w.Key, err)
	}
	return id, nil
}

// sameTx reports whether a and b are the same transaction; values that
// cannot be compared count as the same.
func sameTx(a, b any) (same bool) {
	defer func() {
		if recover() != nil {
			same = true
		}
	}()
	return a == b
}

func checkMessage(msg Message) error {
	bad := func(what string) error {
		return fmt.Errorf("%w: %s; nothing was queued", ErrInvalidMessage, what)
	}
	switch {
	case msg.Topic == "":
		return bad("the topic is empty")
	case len(msg.Topic) > MaxTopic:
		return bad(fmt.Sprintf("topic %.40q... is %d bytes, more than %d", msg.Topic, len(msg.Topic), MaxTopic))
	case !printable(msg.Topic):
		return bad(fmt.Sprintf("topic %q is not UTF-8 or has control characters", msg.Topic))
	}
	names := make(map[string]string, len(msg.Headers))
	for k, v := range msg.Headers {
		if k == "" || !printable(k) || !utf8.ValidString(v) || hasControl(v) {
			return bad(fmt.Sprintf("header %q: %q: a header needs a name, and UTF-8 without control characters", k, v))
		}
		if other, ok := names[strings.ToLower(k)]; ok {
			a, b := min(k, other), max(k, other)
			return bad(fmt.Sprintf("headers %q and %q: header names are case-insensitive, so they are one header set twice", a, b))
		}
		names[strings.ToLower(k)] = k
	}
	return nil
}

func printable(s string) bool { return utf8.ValidString(s) && !hasControl(s) }

func hasControl(s string) bool {
	for _, r := range s {
		if r < 0x20 || r == 0x7f {
			return true
		}
	}
	return false
}
