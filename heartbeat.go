package idem

import (
	"container/heap"
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/idemgo/idem/internal/timeheap"
)

// startHeartbeat starts the heartbeat of an attempt and returns the
// function that stops it (cancelling ctx) and waits for it to end. On the
// system clock no goroutine runs until the first renewal is due (most fns
// end well before a third of the lease): the process's one heartbeat timer
// starts it (heartbeats).
func (r *runner) startHeartbeat(ctx context.Context, attempt int64, lease *leaseState, cancel context.CancelCauseFunc) (stop func()) {
	every := r.cfg.lease / 3
	if _, ok := r.cfg.clock.(systemClock); !ok {
		done := make(chan struct{})
		go r.heartbeat(ctx, attempt, lease, cancel, every, done)
		return func() {
			cancel(nil)
			<-done
		}
	}
	var (
		mu      sync.Mutex
		stopped bool
		done    chan struct{}
	)
	first := heartbeats.add(time.Now().Add(every), func() {
		mu.Lock()
		if stopped {
			mu.Unlock()
			return
		}
		done = make(chan struct{})
		mu.Unlock()
		r.heartbeat(ctx, attempt, lease, cancel, 0, done)
	})
	return func() {
		cancel(nil)
		if heartbeats.remove(first) {
			return // it never started
		}
		mu.Lock()
		stopped = true
		d := done
		mu.Unlock()
		if d != nil {
			<-d
		}
	}
}

// heartbeat renews the lease after first, then every third of it, until ctx
// ends. A renewal that finds a newer attempt cancels ctx with ErrLeaseLost.
func (r *runner) heartbeat(ctx context.Context, attempt int64, lease *leaseState, cancel context.CancelCauseFunc, first time.Duration, done chan<- struct{}) {
	defer close(done)
	every := r.cfg.lease / 3
	for wait := first; ; wait = every {
		if wait > 0 {
			select {
			case <-ctx.Done():
				return
			case <-r.cfg.clock.After(wait):
			}
		} else if ctx.Err() != nil {
			return
		}
		now := r.cfg.clock.Now()
		err := r.s.Renew(ctx, r.key, attempt, now, r.cfg.lease)
		switch {
		case err == nil:
			lease.until.Store(now.Add(r.cfg.lease).UnixNano())
		case errors.Is(err, ErrLeaseLost):
			r.log(ctx, slog.LevelWarn, "lease lost while running; cancelling fn")
			cancel(&takeoverError{key: r.key, attempt: attempt, err: err})
			return
		case ctx.Err() != nil:
			return
		default:
			r.log(ctx, slog.LevelWarn, "lease renewal failed; will retry", slog.Any("error", err))
		}
	}
}

// heartbeats holds the first renewal of every attempt running on the
// system clock, behind one runtime timer armed for the earliest.
//
// A timer per attempt (time.AfterFunc, stopped when fn returns) cost a Run
// whose store waits on a socket (Redis, Postgres) tens of µs of CPU: a
// timer armed earlier than any other wakes a thread the runtime left
// sleeping in the network poller, and on a process whose only timers are
// its Runs' every new one is the earliest. Here the timer is armed again
// only for a first renewal earlier than every one queued (the first Run,
// or a Run with a shorter lease than those running) and when it fires.
var heartbeats hbQueue

// hbQueue runs each function added to it in a goroutine of its own at (or
// just after) its time, unless it is removed first.
type hbQueue struct {
	mu    sync.Mutex
	due   timeheap.Heap[*hbEntry]
	timer *time.Timer
	armed time.Time // when timer fires; zero when it is not armed
	arms  int       // how many times the timer was armed (for tests)
}

// hbEntry is one function queued in an hbQueue.
type hbEntry struct {
	at    time.Time
	start func()
	i     int // its index in the heap; -1 once out of it
}

func (e *hbEntry) HeapTime() time.Time { return e.at }
func (e *hbEntry) HeapIndex() *int     { return &e.i }

// add queues start to run at at.
func (q *hbQueue) add(at time.Time, start func()) *hbEntry {
	e := &hbEntry{at: at, start: start}
	q.mu.Lock()
	defer q.mu.Unlock()
	heap.Push(&q.due, e)
	if q.armed.IsZero() || at.Before(q.armed) {
		q.arm(at)
	}
	return e
}

// remove takes e out of the queue; false if it is out already (it has
// started, or is starting, or was removed).
func (q *hbQueue) remove(e *hbEntry) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if e.i < 0 {
		return false
	}
	heap.Remove(&q.due, e.i)
	return true
}

// arm sets the timer to fire at at. The caller holds q.mu.
func (q *hbQueue) arm(at time.Time) {
	q.arms++
	q.armed = at
	if q.timer == nil {
		q.timer = time.AfterFunc(time.Until(at), q.fire)
		return
	}
	q.timer.Reset(time.Until(at))
}

// fire starts every function due and arms the timer for the next one. A
// timer that fires with nothing due (its entry removed, or armed again
// later meanwhile) only arms it again, if anything is queued.
func (q *hbQueue) fire() {
	q.mu.Lock()
	q.armed = time.Time{}
	now := time.Now()
	var start []func()
	for len(q.due) > 0 && !q.due[0].at.After(now) {
		start = append(start, heap.Pop(&q.due).(*hbEntry).start)
	}
	if len(q.due) > 0 {
		q.arm(q.due[0].at)
	}
	q.mu.Unlock()
	for _, f := range start {
		go f()
	}
}
