package idem

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"unicode/utf8"

	"github.com/idemgo/idem/idemstore"
)

// ErrNoOutbox: [Put] was called where no outbox can take the message:
// outside the body of a RunTx, EachTx or CatchUpTx (or a Scheduler's AddTx
// job), with a transaction other than the body's, or on a store that has
// no outbox. The SQLite Ledger and the Postgres ledgers have one; the
// state file and the redis store do not (they share no transaction with
// business data). Nothing was queued.
var ErrNoOutbox = errors.New("idem: no outbox here")

// ErrInvalidMessage: [Put] was given a message it cannot queue (an empty
// topic, a topic or header that is not UTF-8 or has control characters).
// Nothing was queued.
var ErrInvalidMessage = errors.New("idem: invalid outbox message")

// ErrMessageNotFound: an operator's call on the outbox (retry, drop) named
// a message that is not there, or not in a state the call can change.
// Nothing was written.
var ErrMessageNotFound = idemstore.ErrMessageNotFound

// Message is what [Put] queues: the relay ([Relay]) hands it to a
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
	// headers). Optional.
	Headers map[string]string
}

// MaxTopic is the longest [Message.Topic], in bytes.
const MaxTopic = 200

// Put queues msg in the outbox of tx, the transaction of the body that
// ctx belongs to: a RunTx (RunTx, Ledger.RunTx, the Postgres ledgers'
// RunTx), EachTx or CatchUpTx body, or a Scheduler's AddTx job. The
// message commits with the body's business writes and the key's done
// mark, or not at all: a body that fails, or a transaction that is rolled
// back or killed, leaves no message behind, and none is ever delivered.
//
// It returns the message's id: the key's request id ([Key.RequestID]; in
// EachTx the item's, [Key.ItemRequestID]), a dash and the message's index
// among the messages this attempt has put so far (0, 1, ...). A retried
// attempt that puts its messages in the same order gets the same ids, so
// a receiver that dedupes by the id applies each message once. The relay
// hands the id to the deliverer (the webhook sends it as Idempotency-Key).
//
// Outside such a body, with another transaction than the body's, or on a
// store without an outbox (the state file, redisstore), Put returns an
// error matching [ErrNoOutbox]; an invalid message, [ErrInvalidMessage].
// Either way nothing was queued; return the error from the body so that
// the transaction rolls back.
func Put[Tx any](ctx context.Context, tx Tx, msg Message) (id string, err error) {
	w, _ := ctx.Value(outboxKey{}).(*outboxWriter)
	if w == nil {
		return "", fmt.Errorf("%w: Put outside the body of a RunTx, EachTx or CatchUpTx", ErrNoOutbox)
	}
	own, ok := w.tx.(Tx)
	if !ok || !sameTx(own, tx) {
		return "", fmt.Errorf("%w: Put with a transaction (%T) other than the body's own (%T)", ErrNoOutbox, tx, w.tx)
	}
	store, ok := w.store.(idemstore.OutboxTxStore[Tx])
	if !ok {
		return "", fmt.Errorf("%w: store %T has no outbox (the SQLite Ledger and the Postgres ledgers have one)", ErrNoOutbox, w.store)
	}
	if err := checkMessage(msg); err != nil {
		return "", err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	id = w.requestID() + "-" + strconv.Itoa(w.next)
	w.next++ // whether or not the write succeeds: the ids depend on the order of Puts alone
	m := idemstore.OutboxMessage{ID: id, Topic: msg.Topic, Payload: msg.Payload, Headers: msg.Headers,
		Key: w.key, Item: w.item, Created: w.clock.Now()}
	if m.Payload == nil {
		m.Payload = []byte{}
	}
	if err := store.PutOutbox(ctx, own, []idemstore.OutboxMessage{m}); err != nil {
		return "", fmt.Errorf("idem: put %s (topic %q) for %s: %w", id, msg.Topic, w.key, err)
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
	for k, v := range msg.Headers {
		if k == "" || !printable(k) || !utf8.ValidString(v) || hasControl(v) {
			return bad(fmt.Sprintf("header %q: %q: a header needs a name, and UTF-8 without control characters", k, v))
		}
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

type outboxKey struct{}

// outboxWriter is the outbox of one transactional body's attempt: what
// Put writes through, and the index of its next message.
type outboxWriter struct {
	tx    any // the body's transaction
	store any // the body's store: an OutboxTxStore of the transaction's type, or a store without an outbox
	key   Key
	item  string
	clock Clock

	mu   sync.Mutex
	id   string // the request id, made at the first Put
	next int
}

func (w *outboxWriter) requestID() string {
	if w.id == "" {
		if w.item != "" {
			w.id = w.key.ItemRequestID(w.item)
		} else {
			w.id = w.key.RequestID()
		}
	}
	return w.id
}

// withOutbox returns ctx carrying the outbox of one attempt of a body
// that runs in tx, a transaction of store s, for key (and item, in
// EachTx). A store that is not an OutboxTxStore of Tx gives an outbox that
// refuses every Put with ErrNoOutbox.
func withOutbox[Tx any](ctx context.Context, s any, tx Tx, key Key, item string, clock Clock) context.Context {
	return context.WithValue(ctx, outboxKey{}, &outboxWriter{tx: tx, key: key, item: item, clock: clock, store: s})
}

// withoutOutbox hides an enclosing body's outbox from a fn that does not
// run in its transaction (a Run inside a RunTx body).
func withoutOutbox(ctx context.Context) context.Context {
	if ctx.Value(outboxKey{}) == nil {
		return ctx
	}
	return context.WithValue(ctx, outboxKey{}, (*outboxWriter)(nil))
}
