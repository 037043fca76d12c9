package redisstore_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/internal/testwait"
	"github.com/idemgo/idem/redisstore"
)

// TestTwoClientsRunOnce: 16 goroutines, through two stores on clients of
// their own (two hosts, as far as the server can tell), run one key in
// each mode; fn runs once, and every caller gets nil or ErrInProgress.
func TestTwoClientsRunOnce(t *testing.T) {
	t.Parallel()
	c1, c2 := newClient(t), newClient(t)
	s1 := openStore(t, c1)
	s2, err := redisstore.New(context.Background(), c2, redisstore.WithPrefix(s1.Prefix()))
	if err != nil {
		t.Fatal(err)
	}
	for _, mode := range []struct {
		name string
		opt  idem.Option
	}{
		{"at-least-once", idem.AtLeastOnce()},
		{"at-most-once", idem.AtMostOnce()},
		{"two-phase", idem.TwoPhase(func(context.Context, idem.Key) (bool, error) { return false, nil })},
	} {
		k := idem.Key{Job: "twohosts-" + mode.name, Period: "2026-10-27"}
		var ran atomic.Int32
		var wg sync.WaitGroup
		for i := range 16 {
			s := []*redisstore.Store{s1, s2}[i%2]
			wg.Go(func() {
				err := s.Run(context.Background(), k, func(context.Context) error { ran.Add(1); return nil }, mode.opt)
				if err != nil && !errors.Is(err, idem.ErrInProgress) {
					t.Errorf("%s: Run: %v (only nil or ErrInProgress may reach a caller)", mode.name, err)
				}
			})
		}
		testwait.Group(t, &wg, "16 concurrent Runs of %s", k)
		rec, ok, err := s2.Lookup(context.Background(), k)
		if n := ran.Load(); n != 1 || err != nil || !ok || rec.Status != idem.StatusDone || rec.Attempt != 1 {
			t.Fatalf("%s: fn ran %d times; record %+v, %v, %v; want once, done by attempt 1", mode.name, n, rec, ok, err)
		}
	}
}
