// Package capture lets the idem command store a command's output with a
// period's done mark as raw bytes, through the fn of an ordinary Run or
// CatchUp: the caller puts a Slot in the context it passes to the call, fn
// sets it, and the engine stores what fn set with the done mark of that
// attempt. Library users store values with idem.RunValue instead.
package capture

import (
	"context"
	"sync"
)

// Slot holds the value fn set for its attempt.
type Slot struct {
	mu sync.Mutex
	b  []byte
}

type slotKey struct{}

// With returns ctx carrying s.
func With(ctx context.Context, s *Slot) context.Context { return context.WithValue(ctx, slotKey{}, s) }

// From returns the slot ctx carries, or nil.
func From(ctx context.Context) *Slot {
	s, _ := ctx.Value(slotKey{}).(*Slot)
	return s
}

// Set makes b the value of the running attempt.
func (s *Slot) Set(b []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.b = b
}

// Take returns the value set since the last Take, and empties the slot.
func (s *Slot) Take() []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	b := s.b
	s.b = nil
	return b
}
