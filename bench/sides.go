package main

import (
	"context"
	"fmt"

	"github.com/idemgo/idem"
)

// dupPasses is how many times a duplicate measurement of idem or the floor
// goes over its n done keys (a duplicate costs microseconds, not an fsync).
const dupPasses = 20

// runner is a ledger: *idem.Ledger or *pgledger.Ledger.
type runner interface {
	Run(ctx context.Context, key idem.Key, fn func(context.Context) error, opts ...idem.Option) error
}

// ledgerFreshSide runs n new keys through l.Run (AtLeastOnce, the default)
// each round.
func ledgerFreshSide(l runner, n int) side {
	return side{ops: func(ctx context.Context, round int) (int, error) {
		keys := roundKeys("fresh", round, n)
		for _, k := range keys {
			if err := l.Run(ctx, k, noop); err != nil {
				return 0, err
			}
		}
		return len(keys), nil
	}}
}

// ledgerDuplicateSide runs keys to done (untimed) and returns the side that
// triggers them again, dupPasses times over; fn must never run.
func ledgerDuplicateSide(ctx context.Context, l runner, keys []idem.Key) (side, error) {
	for _, k := range keys {
		if err := l.Run(ctx, k, noop); err != nil {
			return side{}, err
		}
	}
	ran := 0
	fn := func(context.Context) error { ran++; return nil }
	return side{ops: func(ctx context.Context, round int) (int, error) {
		for range dupPasses {
			for _, k := range keys {
				if err := l.Run(ctx, k, fn); err != nil {
					return 0, err
				}
			}
		}
		if ran > 0 {
			return 0, fmt.Errorf("fn ran %d times for keys already done", ran)
		}
		return dupPasses * len(keys), nil
	}}, nil
}
