package idemstore

import (
	"context"
	"math"
	"time"
)

// LimitStore is a store that keeps limits shared by every process that
// uses it: package limit's Rate (starts per second, with a burst) and
// AtOnce (runs at once). A limit is known by its name alone; the store
// creates it the first time it is named. The SQLite ledger (every process
// of one host), the Postgres ledgers and the Redis store implement it; the
// state file does not (it serves one process at a time).
//
// Times are the store's own: the SQLite ledger's host clock, the database
// server's, the Redis server's. Only durations cross the interface, so
// that the clocks of the processes sharing a limit need not agree.
type LimitStore interface {
	// TakeRate reserves n starts of the rate limit named name, by the
	// generic cell rate algorithm on the store's clock (see [TakeRate]):
	// it returns how long the caller must wait before it starts them,
	// zero for at once. When that wait would be longer than maxWait,
	// nothing is reserved, reserved is false, and wait says when to ask
	// again. A reservation a caller does not use (it was cancelled while
	// it waited) is lost: the limit errs on the side of fewer starts.
	TakeRate(ctx context.Context, name string, r Rate, n int, maxWait time.Duration) (wait time.Duration, reserved bool, err error)

	// AcquireSlot takes a slot of the limit named name, which lets max
	// holders at once, for h until lease ends: when fewer than max slots
	// are held, or a slot's lease has ended, or its holder's process has
	// certainly ended ([HolderGone] of its Owner). It returns the slot's
	// number, or ok false when max slots are held; then wait is how long
	// until the first of their leases ends (a hint for when to ask again).
	AcquireSlot(ctx context.Context, name string, max int, h SlotHolder, lease time.Duration) (slot int, ok bool, wait time.Duration, err error)

	// RenewSlot extends h's hold of the slot to lease from now. held is
	// false when h no longer holds it (its lease ended and another took
	// it, or it was released): then nothing is changed.
	RenewSlot(ctx context.Context, name string, slot int, h SlotHolder, lease time.Duration) (held bool, err error)

	// ReleaseSlot gives the slot back, if h still holds it.
	ReleaseSlot(ctx context.Context, name string, slot int, h SlotHolder) error
}

// Rate is a rate limit's parameters: PerSecond starts a second, and up to
// Burst at once after a quiet time.
type Rate struct {
	PerSecond float64
	Burst     int
}

// Interval is the time between two starts: a second divided by PerSecond.
func (r Rate) Interval() time.Duration {
	return time.Duration(math.Round(float64(time.Second) / r.PerSecond))
}

// SlotHolder is who holds a slot of an AtOnce limit: Owner is the process
// ([Owner]: what [HolderGone] reads), Token tells one hold from another of
// the same process.
type SlotHolder struct {
	Owner string
	Token string
}

// TakeRate is the generic cell rate algorithm that LimitStore.TakeRate
// runs, for a store that runs it in Go: tat is the limit's theoretical
// arrival time as stored (zero for a limit never taken), now the store's
// clock. It returns the tat to store (unchanged when not reserved), and
// how long the caller waits.
//
// The limit lets Burst starts through at once and then one per Interval:
// n starts move tat on by n intervals from max(tat, now), and may start
// once tat is no more than Burst intervals ahead of now.
func TakeRate(tat, now time.Time, r Rate, n int, maxWait time.Duration) (newTAT time.Time, wait time.Duration, reserved bool) {
	iv := r.Interval()
	if tat.Before(now) {
		tat = now
	}
	next := tat.Add(time.Duration(n) * iv)
	wait = max(next.Sub(now)-time.Duration(r.Burst)*iv, 0)
	if wait > maxWait {
		return tat, wait - maxWait, false
	}
	return next, wait, true
}
