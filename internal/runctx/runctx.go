// Package runctx carries in a context what package idemtest's crash kit
// tells idem's engine about the runs made with that context: the owner
// their claims name, and that each call makes one attempt.
package runctx

import (
	"context"

	"github.com/idemgo/idem/internal/holder"
)

type ownerKey struct{}

// WithOwner returns a context whose runs claim as owner (one that
// holder.Stand made) instead of this process's own owner.
func WithOwner(ctx context.Context, owner string) context.Context {
	return context.WithValue(ctx, ownerKey{}, owner)
}

// Owner returns the owner that a run made with ctx claims as: the one
// WithOwner set, or this process's (holder.Self).
func Owner(ctx context.Context) string {
	if o, ok := ctx.Value(ownerKey{}).(string); ok && o != "" {
		return o
	}
	return holder.Self()
}

type oneAttemptKey struct{}

// WithOneAttempt returns a context in which a call that is not given
// RetryWithin (or OneAttempt) makes one attempt, as with OneAttempt:
// it does not retry in-process, WaitForTurn or not.
func WithOneAttempt(ctx context.Context) context.Context {
	return context.WithValue(ctx, oneAttemptKey{}, true)
}

// OneAttempt reports whether ctx was made by WithOneAttempt.
func OneAttempt(ctx context.Context) bool {
	v, _ := ctx.Value(oneAttemptKey{}).(bool)
	return v
}
