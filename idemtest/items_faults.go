package idemtest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemstore"
)

// errTransient is what a faulty store (faultyItems) returns: a store that
// failed for a moment, as over a connection that broke or a failover.
var errTransient = errors.New("idemtest: transient store error (injected)")

// storeFault fails one call of a store's methods for one key: the nth
// call of method, either before it reaches the store (nothing written) or
// after the store applied it (the reply lost).
type storeFault struct {
	key    idem.Key
	method string // one of faultMethods
	nth    int
	after  bool

	mu   sync.Mutex
	seen int
	hit  string // the method that failed; "" while none has
}

func (f *storeFault) String() string {
	when := "before the store"
	if f.after {
		when = "after the store applied it"
	}
	return fmt.Sprintf("its call %d of %s fails %s", f.nth, f.method, when)
}

// faultMethods are the store's methods a storeFault can fail. (RecordItems,
// of the store or of a turn, is not among them: the model's sets of up to
// 12 items never reach it, Each gives them to the turn's Seal.)
var faultMethods = []string{"Lookup", "Claim", "Renew", "Finish", "AddItems", "SealItems", "CountItems", "ClaimItems",
	"FinishItems", "RecordTurn", "turn.Seal", "MarkFresh"}

// fire counts a call of method for key and reports whether it is the one
// that fails.
func (f *storeFault) fire(method string, key idem.Key) bool {
	if key != f.key || method != f.method {
		return false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.seen++
	if f.seen != f.nth {
		return false
	}
	f.hit = method
	return true
}

func (f *storeFault) fired() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.hit
}

// faultCall runs the store's call do of method for key, failing it as f says:
// errTransient without calling do, or after it (its result dropped, and
// undo run on it, as a broken session would).
func faultCall[T any](f *storeFault, method string, key idem.Key, do func() (T, error), undo func(T)) (T, error) {
	var zero T
	if !f.fire(method, key) {
		return do()
	}
	if !f.after {
		return zero, fmt.Errorf("%s %s: %w", method, key, errTransient)
	}
	v, err := do()
	if err == nil && undo != nil {
		undo(v)
	}
	return zero, fmt.Errorf("%s %s (applied, reply lost): %w", method, key, errTransient)
}

// faultyItems is an ItemStore whose calls fail as its storeFault says.
type faultyItems struct {
	s idemstore.ItemStore
	f *storeFault
}

// withFault wraps s so that f fails one of its calls. A store that gives
// turns to record a period's set and marks a fresh key done in one write
// (the Postgres ledgers) keeps both, and its turns' calls fail too; one
// that gives turns alone (mysqlledger) is wrapped without them.
func withFault(s idemstore.ItemStore, f *storeFault) idemstore.ItemStore {
	fi := &faultyItems{s: s, f: f}
	if t, ok := s.(interface {
		idemstore.ItemRecordTurns
		idemstore.FreshMarker
	}); ok {
		return &faultyTurns{faultyItems: fi, t: t}
	}
	return fi
}

// DefaultOptions are the store's (its clock, say), which the engine takes
// as the calls' defaults.
func (s *faultyItems) DefaultOptions() []idem.Option {
	if d, ok := s.s.(interface{ DefaultOptions() []idem.Option }); ok {
		return d.DefaultOptions()
	}
	return nil
}

func (s *faultyItems) Claim(ctx context.Context, req idemstore.ClaimRequest) (idemstore.Claim, error) {
	return faultCall(s.f, "Claim", req.Key, func() (idemstore.Claim, error) { return s.s.Claim(ctx, req) }, nil)
}

func (s *faultyItems) Renew(ctx context.Context, key idem.Key, attempt int64, now time.Time, lease time.Duration) error {
	_, err := faultCall(s.f, "Renew", key, func() (struct{}, error) { return struct{}{}, s.s.Renew(ctx, key, attempt, now, lease) }, nil)
	return err
}

func (s *faultyItems) Finish(ctx context.Context, key idem.Key, attempt int64, end idemstore.End) error {
	_, err := faultCall(s.f, "Finish", key, func() (struct{}, error) { return struct{}{}, s.s.Finish(ctx, key, attempt, end) }, nil)
	return err
}

func (s *faultyItems) Resolve(ctx context.Context, key idem.Key, to idemstore.Resolution) error {
	return s.s.Resolve(ctx, key, to)
}

func (s *faultyItems) Lookup(ctx context.Context, key idem.Key) (idemstore.Record, bool, error) {
	type found struct {
		rec idemstore.Record
		ok  bool
	}
	v, err := faultCall(s.f, "Lookup", key, func() (found, error) {
		rec, ok, err := s.s.Lookup(ctx, key)
		return found{rec, ok}, err
	}, nil)
	return v.rec, v.ok, err
}

func (s *faultyItems) AddItems(ctx context.Context, key idem.Key, items []string) error {
	_, err := faultCall(s.f, "AddItems", key, func() (struct{}, error) { return struct{}{}, s.s.AddItems(ctx, key, items) }, nil)
	return err
}

func (s *faultyItems) SealItems(ctx context.Context, key idem.Key) error {
	_, err := faultCall(s.f, "SealItems", key, func() (struct{}, error) { return struct{}{}, s.s.SealItems(ctx, key) }, nil)
	return err
}

func (s *faultyItems) CountItems(ctx context.Context, key idem.Key) (idemstore.ItemCounts, error) {
	return faultCall(s.f, "CountItems", key, func() (idemstore.ItemCounts, error) { return s.s.CountItems(ctx, key) }, nil)
}

func (s *faultyItems) ClaimItems(ctx context.Context, key idem.Key, req idemstore.ItemClaimRequest) (idemstore.ItemBatch, error) {
	return faultCall(s.f, "ClaimItems", key, func() (idemstore.ItemBatch, error) { return s.s.ClaimItems(ctx, key, req) }, nil)
}

func (s *faultyItems) FinishItems(ctx context.Context, key idem.Key, step idemstore.ItemStep, ends []idemstore.ItemEnd) ([]string, error) {
	return faultCall(s.f, "FinishItems", key, func() ([]string, error) { return s.s.FinishItems(ctx, key, step, ends) }, nil)
}

// faultyTurns is faultyItems over a store that gives turns and marks
// fresh keys done.
type faultyTurns struct {
	*faultyItems
	t interface {
		idemstore.ItemRecordTurns
		idemstore.FreshMarker
	}
}

func (s *faultyTurns) RecordItems(ctx context.Context, key idem.Key, chunks [][]string) error {
	return s.t.RecordItems(ctx, key, chunks)
}

// RecordTurn's reply lost after the turn was taken ends the turn, as the
// end of the session that held it would.
func (s *faultyTurns) RecordTurn(ctx context.Context, key idem.Key, wait time.Duration) (idemstore.ItemTurn, error) {
	t, err := faultCall(s.f, "RecordTurn", key, func() (idemstore.ItemTurn, error) { return s.t.RecordTurn(ctx, key, wait) },
		func(t idemstore.ItemTurn) { t.Release() })
	if err != nil {
		return nil, err
	}
	return &faultyTurn{t: t, f: s.f, key: key}, nil
}

// faultyTurn is a turn whose calls fail as f says. A Seal whose reply is
// lost has sealed the set (and ended the turn).
type faultyTurn struct {
	t   idemstore.ItemTurn
	f   *storeFault
	key idem.Key
}

func (t *faultyTurn) Sealed() bool { return t.t.Sealed() }
func (t *faultyTurn) Release()     { t.t.Release() }

func (t *faultyTurn) RecordItems(ctx context.Context, chunks [][]string) error {
	return t.t.RecordItems(ctx, chunks)
}

func (t *faultyTurn) Seal(ctx context.Context, last [][]string) error {
	_, err := faultCall(t.f, "turn.Seal", t.key, func() (struct{}, error) { return struct{}{}, t.t.Seal(ctx, last) }, nil)
	return err
}

func (s *faultyTurns) MarkFresh(ctx context.Context, req idemstore.ClaimRequest) (bool, error) {
	return faultCall(s.f, "MarkFresh", req.Key, func() (bool, error) { return s.t.MarkFresh(ctx, req) }, nil)
}
