package testledger

import (
	"fmt"
	"iter"
	"maps"
	"sync"
	"testing"
	"time"

	"github.com/idemgo/idem"
)

// Points is the key of the fan-out tests' period: a day's points.
var Points = idem.Key{Job: "daily_points", Period: "2026-10-27"}

// Accounts streams n item ids without holding them.
func Accounts(n int) iter.Seq2[string, error] {
	return func(yield func(string, error) bool) {
		for i := range n {
			if !yield(fmt.Sprintf("acct-%06d", i), nil) {
				return
			}
		}
	}
}

// Tally counts the items a fan-out applied, from several workers at once.
type Tally struct {
	mu sync.Mutex
	n  map[string]int
}

// NewTally returns an empty Tally.
func NewTally() *Tally { return &Tally{n: map[string]int{}} }

// Add counts item once more.
func (c *Tally) Add(item string) {
	c.mu.Lock()
	c.n[item]++
	c.mu.Unlock()
}

// Check fails t unless total items were applied, each once (or, if
// atLeast, each at least once).
func (c *Tally) Check(t *testing.T, total int, atLeast bool) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.n) != total {
		t.Fatalf("%d items applied, want %d", len(c.n), total)
	}
	for it, n := range c.n {
		if n != 1 && !(atLeast && n > 1) {
			t.Fatalf("%s applied %d times", it, n)
		}
	}
}

// Daily is the catch-up tests' schedule: days in UTC.
var Daily = idem.Daily(time.UTC)

// Day returns the instant of 2026-10-01 + n days at 02:00 UTC.
func Day(n int) time.Time { return time.Date(2026, 10, 1+n, 2, 0, 0, 0, time.UTC) }

// N returns how often each item was applied.
func (c *Tally) N() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.n)
}
