package scheduler

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/internal/hook"
	"github.com/idemgo/idem/outbox"
)

// RelayStatus is what a [Scheduler] knows of one of its outbox relays
// ([Scheduler.AddRelay]), since it started.
type RelayStatus struct {
	Name    string `json:"name"`
	Running bool   `json:"running"`
	// LastPass is when the relay's last pass ended (by the Scheduler's
	// clock); LastError is that pass's store error, if it had one.
	LastPass  time.Time `json:"last_pass"`
	LastError string    `json:"last_error,omitempty"`
	// Counts of the delivery attempts since the Scheduler started.
	Delivered  int64 `json:"delivered"`
	Retrying   int64 `json:"retrying"`
	Parked     int64 `json:"parked"`
	Superseded int64 `json:"superseded"`
	// Ready is false while the relay's last pass failed on a store error.
	Ready bool   `json:"ready"`
	Why   string `json:"why,omitempty"`
}

// schedRelay is one relay of a Scheduler.
type schedRelay struct {
	name string
	loop func(ctx context.Context) // the relay's passes, until ctx ends
	st   RelayStatus               // under the Scheduler's lock
}

// relayLoop is package outbox's: it checks a relay's options and returns
// its loop.
var relayLoop = hook.Relay.(func(idem.Store, outbox.Deliverer, []outbox.Option) (func(context.Context), error))

// AddRelay adds an outbox relay to the Scheduler: while [Scheduler.Run]
// runs, it runs [outbox.Relay] on store (which must have an outbox, as
// outbox.Relay's does) with d and opts (the Scheduler's logger unless
// opts set another), and it stops when Run stops (a
// delivery in progress has its context cancelled; the message is due again
// at once, and delivered again: at least once). Its state shows in
// Status().Relays, and a relay whose last pass failed on a store error
// makes the Scheduler unready.
//
// The relay keeps its own clock, the system clock unless opts give
// outbox.WithClock: not the Scheduler's ([idem.WithClock]). Its leases
// are what keeps two relays, of this process or of another replica, from
// delivering one message at once; a test clock that jumps past a lease
// while a delivery is under way would hand the message out again.
//
// name names it in Status (it must be new). An invalid option is an error
// matching [idem.ErrInvalidOption]; a Scheduler that has stopped returns
// [ErrClosed]. A relay added while Run runs starts at once.
func (s *Scheduler) AddRelay(name string, store idem.Store, d outbox.Deliverer, opts ...outbox.Option) error {
	if store == nil || d == nil {
		panic("scheduler: AddRelay needs a store and a deliverer")
	}
	if name == "" {
		return fmt.Errorf("idem: Scheduler.AddRelay: %w: the relay needs a name", idem.ErrInvalidOption)
	}
	r := &schedRelay{name: name, st: RelayStatus{Name: name, Ready: true}}
	var base []outbox.Option
	if s.logger != nil {
		base = append(base, outbox.WithLogger(s.logger))
	}
	all := append(append(base, opts...), outbox.OnPass(func(res outbox.Result, err error) { s.pass(r, res, err) }))
	loop, err := relayLoop(store, d, all)
	if err != nil {
		return fmt.Errorf("idem: Scheduler.AddRelay %s: %w", name, err)
	}
	r.loop = loop
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.state >= schedStopping {
		return ErrClosed
	}
	for _, r := range s.relays {
		if r.name == name {
			return fmt.Errorf("idem: Scheduler.AddRelay %s: a relay of this name was added already", name)
		}
	}
	s.relays = append(s.relays, r)
	if s.state == schedRunning {
		s.startRelay(r)
	}
	return nil
}

// startRelay starts r's loop, under the Scheduler's lock, while it runs.
func (s *Scheduler) startRelay(r *schedRelay) {
	ctx := s.relayCtx
	r.st.Running = true
	s.relayRuns.Add(1)
	go func() {
		defer s.relayRuns.Done()
		r.loop(ctx)
		s.mu.Lock()
		r.st.Running = false
		s.mu.Unlock()
	}()
}

// startRelays starts every relay, under the Scheduler's lock, as Run
// starts; the relays stop when stopRelays is called.
func (s *Scheduler) startRelays(work context.Context) {
	s.relayCtx, s.relayStop = context.WithCancel(work)
	for _, r := range s.relays {
		s.startRelay(r)
	}
}

// stopRelays stops the relays and waits for them.
func (s *Scheduler) stopRelays() {
	s.mu.Lock()
	stop := s.relayStop
	s.mu.Unlock()
	if stop != nil {
		stop()
	}
	s.relayRuns.Wait()
}

// relayState is the Scheduler's relays' part of its state.
type relayState struct {
	relays    []*schedRelay
	relayCtx  context.Context
	relayStop context.CancelFunc
	relayRuns sync.WaitGroup
}

// pass records a pass of r (its result and store error) in its status.
func (s *Scheduler) pass(r *schedRelay, res outbox.Result, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := &r.st
	st.LastPass = s.clock.Now()
	st.Delivered += int64(res.Delivered)
	st.Retrying += int64(res.Retrying)
	st.Parked += int64(res.Parked)
	st.Superseded += int64(res.Superseded)
	st.LastError, st.Ready, st.Why = "", true, ""
	if err != nil && s.relayCtx.Err() == nil {
		st.LastError, st.Ready, st.Why = err.Error(), false, "the relay's last pass failed: "+err.Error()
	}
}
