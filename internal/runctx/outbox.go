package runctx

import (
	"context"
	"strconv"
	"sync"
	"time"

	"github.com/idemgo/idem/idemstore"
)

type outboxKey struct{}

// An Outbox is the outbox of one transactional body's attempt, which the
// engine puts in the body's context: what package outbox's Put writes
// through, and the index of its next message.
type Outbox struct {
	Tx    any // the body's transaction
	Store any // the body's store: an OutboxTxStore of the transaction's type, or a store without an outbox
	Key   idemstore.Key
	Item  string
	// Revision is the period's revision (a re-run's: idem.Rerun); its
	// messages' ids are those of the revision's request id.
	Revision int64
	Now      func() time.Time // the run's clock

	mu   sync.Mutex
	id   string // the request id, made at the first Put
	next int
}

// NextID is the id of the next message put: the key's revision's (or
// the item's) request id, a dash and the index of the message among this attempt's.
// The index counts every call, whether or not its write succeeds: the
// ids depend on the order of Puts alone.
func (w *Outbox) NextID() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.id == "" {
		if w.Item != "" {
			w.id = w.Key.ItemRequestID(w.Item)
		} else {
			w.id = w.Key.RevisionRequestID(w.Revision)
		}
	}
	id := w.id + "-" + strconv.Itoa(w.next)
	w.next++
	return id
}

// WithOutbox returns ctx carrying w.
func WithOutbox(ctx context.Context, w *Outbox) context.Context {
	return context.WithValue(ctx, outboxKey{}, w)
}

// WithoutOutbox hides an enclosing body's outbox from a fn that does not
// run in its transaction (a Run inside a RunTx body).
func WithoutOutbox(ctx context.Context) context.Context {
	if ctx.Value(outboxKey{}) == nil {
		return ctx
	}
	return context.WithValue(ctx, outboxKey{}, (*Outbox)(nil))
}

// OutboxOf is the outbox ctx carries, nil if none.
func OutboxOf(ctx context.Context) *Outbox {
	w, _ := ctx.Value(outboxKey{}).(*Outbox)
	return w
}
