package idem

import (
	"context"

	"github.com/idemgo/idem/internal/runctx"
)

// withOutbox returns ctx carrying the outbox of one attempt of a body
// that runs in tx, a transaction of store s, for key (and item, in
// EachTx): what package outbox's Put writes through. A store that is not
// an OutboxTxStore of Tx gives an outbox that refuses every Put.
func withOutbox[Tx any](ctx context.Context, s any, tx Tx, key Key, item string, clock Clock) context.Context {
	w := &runctx.Outbox{Tx: tx, Store: s, Key: key, Item: item, Now: clock.Now}
	if info, ok := InfoFrom(ctx); ok && item == "" {
		w.Revision = info.Revision // a re-run's messages have the revision's ids
	}
	return runctx.WithOutbox(ctx, w)
}

// withoutOutbox hides an enclosing body's outbox from a fn that does not
// run in its transaction (a Run inside a RunTx body).
func withoutOutbox(ctx context.Context) context.Context { return runctx.WithoutOutbox(ctx) }
