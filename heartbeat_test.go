package idem

import (
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgo/idem/internal/testwait"
)

// stopQueue stops q's timer when t ends, so that no test leaves it armed.
func stopQueue(t *testing.T, q *hbQueue) {
	t.Cleanup(func() {
		q.mu.Lock()
		defer q.mu.Unlock()
		if q.timer != nil {
			q.timer.Stop()
		}
	})
}

// TestHeartbeatQueueArmsOnlyForTheEarliest: the queue's timer is armed
// again only for a time earlier than every one queued, so that Runs with
// the same lease, one after the other, arm it once between its firings.
func TestHeartbeatQueueArmsOnlyForTheEarliest(t *testing.T) {
	q := &hbQueue{}
	stopQueue(t, q)
	now := time.Now()
	arms := func() int {
		q.mu.Lock()
		defer q.mu.Unlock()
		return q.arms
	}
	var es []*hbEntry
	for i, c := range []struct {
		in   time.Duration
		arms int
	}{
		{time.Hour, 1},
		{2 * time.Hour, 1},
		{90 * time.Minute, 1},
		{30 * time.Minute, 2}, // earlier than every one queued
		{45 * time.Minute, 2},
	} {
		es = append(es, q.add(now.Add(c.in), func() { t.Errorf("entry %d started", i) }))
		if got := arms(); got != c.arms {
			t.Fatalf("after adding an entry due in %v: timer armed %d times, want %d", c.in, got, c.arms)
		}
	}
	for i, e := range es {
		if !q.remove(e) {
			t.Errorf("entry %d: remove found it out of the queue", i)
		}
		if q.remove(e) {
			t.Errorf("entry %d: removed twice", i)
		}
	}
	if n := len(q.due); n != 0 {
		t.Errorf("%d entries left in the queue", n)
	}
}

// TestHeartbeatQueueEarlierEntryStarts: an entry due before the one the
// timer was armed for starts at its own time, not the other's (an hour
// later); a removed entry is out of the queue.
func TestHeartbeatQueueEarlierEntryStarts(t *testing.T) {
	q := &hbQueue{}
	stopQueue(t, q)
	now := time.Now()
	late := q.add(now.Add(time.Hour), func() { t.Error("the entry due in an hour started") })
	gone := q.add(now.Add(30*time.Minute), func() { t.Error("a removed entry started") })
	if !q.remove(gone) {
		t.Fatal("remove of an entry not due yet found it out of the queue")
	}
	started := make(chan int, 2)
	q.add(now.Add(20*time.Millisecond), func() { started <- 1 })
	q.add(now.Add(10*time.Millisecond), func() { started <- 2 })
	got := map[int]bool{}
	for range 2 {
		got[testwait.Recv(t, started, "the entries due in 10 and 20 ms to start (the timer was armed for an hour first)")] = true
	}
	if !got[1] || !got[2] {
		t.Fatalf("started %v, want both", got)
	}
	if !q.remove(late) {
		t.Error("the entry due in an hour was out of the queue")
	}
}

// TestHeartbeatQueueConcurrent: goroutines add entries due within a few ms
// and remove some at once; an entry whose remove succeeded never starts,
// every other starts exactly once.
func TestHeartbeatQueueConcurrent(t *testing.T) {
	q := &hbQueue{}
	stopQueue(t, q)
	const workers, each = 8, 200
	type tally struct {
		started atomic.Int32
		removed atomic.Bool
	}
	all := make([]*tally, workers*each)
	var want atomic.Int32
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				tl := &tally{}
				all[w*each+i] = tl
				e := q.add(time.Now().Add(time.Duration(rand.IntN(5000))*time.Microsecond), func() { tl.started.Add(1) })
				if i%2 == 0 && q.remove(e) {
					tl.removed.Store(true)
					continue
				}
				want.Add(1)
			}
		}()
	}
	testwait.Group(t, &wg, "the adding goroutines")
	total := func() (n int32) {
		for _, tl := range all {
			n += tl.started.Load()
		}
		return n
	}
	testwait.Until(t, func() bool { return total() >= want.Load() }, "%d entries not removed to start", want.Load())
	for i, tl := range all {
		switch n := tl.started.Load(); {
		case tl.removed.Load() && n != 0:
			t.Errorf("entry %d: removed, started %d times", i, n)
		case !tl.removed.Load() && n != 1:
			t.Errorf("entry %d: started %d times, want 1", i, n)
		}
	}
}
