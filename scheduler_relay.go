package idem

import (
	"context"
	"fmt"
	"sync"
	"time"

	"log/slog"
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

// A Relay is a loop that a [Scheduler] runs beside its jobs
// ([Scheduler.AddRelay]): package outbox's NewRelay makes one that
// delivers a store's outbox.
type Relay interface {
	// RunRelay makes passes until ctx ends. After each pass it calls pass
	// with what the pass did and the pass's store error, if any. logger is
	// the Scheduler's ([WithLogger]; nil: none), for a relay given no
	// logger of its own.
	RunRelay(ctx context.Context, logger *slog.Logger, pass func(RelayPass, error))
}

// RelayPass is what one pass of a [Relay] did: its delivery attempts by
// how they ended.
type RelayPass struct {
	Delivered  int // marked delivered
	Retrying   int // failed; due again later
	Parked     int // failed for good
	Superseded int // ends refused: another relay took the message over
}

// schedRelay is one relay of a Scheduler.
type schedRelay struct {
	name  string
	relay Relay
	st    RelayStatus // under the Scheduler's lock
}

// AddRelay adds a relay to the Scheduler (package outbox's NewRelay:
// an outbox relay): while [Scheduler.Run] runs, it runs r, with the
// Scheduler's logger unless r has its own, and it stops when Run stops (an
// outbox delivery in progress has its context cancelled; the message is
// due again at once, and delivered again: at least once). Its state shows
// in Status().Relays, and a relay whose last pass failed on a store error
// makes the Scheduler unready.
//
// An outbox relay keeps its own clock, the system clock unless its
// options give outbox.WithClock: not the Scheduler's ([WithClock]). Its
// leases are what keeps two relays, of this process or of another
// replica, from delivering one message at once; a test clock that jumps
// past a lease while a delivery is under way would hand the message out
// again.
//
// name names it in Status (it must be new; "" is an error matching
// [ErrInvalidOption]); a Scheduler that has stopped returns
// [ErrSchedulerClosed]. A relay added while Run runs starts at once.
func (s *Scheduler) AddRelay(name string, r Relay) error {
	if r == nil {
		panic("idem: Scheduler.AddRelay needs a relay")
	}
	if name == "" {
		return fmt.Errorf("idem: Scheduler.AddRelay: %w: the relay needs a name", ErrInvalidOption)
	}
	sr := &schedRelay{name: name, relay: r, st: RelayStatus{Name: name, Ready: true}}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.state >= schedStopping {
		return ErrSchedulerClosed
	}
	for _, o := range s.relays {
		if o.name == name {
			return fmt.Errorf("idem: Scheduler.AddRelay %s: a relay of this name was added already", name)
		}
	}
	s.relays = append(s.relays, sr)
	if s.state == schedRunning {
		s.startRelay(sr)
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
		r.relay.RunRelay(ctx, s.logger, func(p RelayPass, err error) { s.pass(r, p, err) })
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
func (s *Scheduler) pass(r *schedRelay, res RelayPass, err error) {
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
