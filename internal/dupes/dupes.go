// Package dupes keeps how often a store's recent claims found their key
// done, for stores that answer a done key one way (a plain read) and take
// a new key another (a write straight away): each way is one round trip
// when it guesses right, and one more when it does not.
package dupes

import "sync/atomic"

// Recent counts, up to 16, the recent claims that found their key done:
// +1 per done key, halved per key that was not. Its zero value guesses
// "not done". Safe for concurrent use; a lost update only moves a guess.
type Recent struct{ n atomic.Int32 }

// Mostly reports whether most recent claims found their key done: at
// least 8 of the count. A run of new keys turns it within a few claims.
func (r *Recent) Mostly() bool { return r.n.Load() >= 8 }

// Saw records a claim's finding: done or not.
func (r *Recent) Saw(done bool) {
	n := r.n.Load()
	switch {
	case done && n < 16:
		r.n.CompareAndSwap(n, n+1)
	case !done && n > 0:
		r.n.CompareAndSwap(n, n/2)
	}
}
