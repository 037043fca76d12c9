package core

import (
	"context"
	"fmt"
	"reflect"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemstore"
	"github.com/idemgo/idem/internal/storeof"
)

// StoreAs is the store behind s ([idemstore.Of]) as a T, the store
// interface that the call named call needs: a compile-time check given up
// (the calls take idem.Store, whose store methods are out of view), so
// what is not one is an error naming the call, s's type and T, returned
// before anything is written.
func StoreAs[T any](call string, s any) (T, error) {
	var zero T
	st, err := idemstore.Of(s)
	if err != nil {
		return zero, fmt.Errorf("idem: %s: %w", call, err)
	}
	t, ok := st.(T)
	if !ok {
		return zero, storeof.Lacks(call, s, reflect.TypeFor[T]().String())
	}
	return t, nil
}

// TxStore is s, a store of the store interfaces, as an idem.TxStore: what
// idem.RunTx and the calls of this module's packages that take one need
// for a store that has no RunTx method of its own (the conformance suites
// get stores that way). idemstore.Of(TxStore(s)) is s, with every
// interface s implements.
func TxStore[Tx any](s idemstore.TxStore[Tx]) idem.TxStore[Tx] { return txStore[Tx]{s} }

type txStore[Tx any] struct{ s idemstore.TxStore[Tx] }

func (t txStore[Tx]) StoreBehind() any { return t.s }

func (t txStore[Tx]) Lookup(ctx context.Context, key idem.Key) (idem.Record, bool, error) {
	return t.s.Lookup(ctx, key)
}

func (t txStore[Tx]) Resolve(ctx context.Context, key idem.Key, to idem.Resolution) error {
	return t.s.Resolve(ctx, key, to)
}

func (t txStore[Tx]) RunTx(ctx context.Context, key idem.Key, fn func(context.Context, Tx) error, opts ...idem.Option) error {
	return idem.RunTx(ctx, t, key, fn, opts...)
}
