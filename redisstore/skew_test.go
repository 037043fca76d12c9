package redisstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/internal/testwait"
	"github.com/idemgo/idem/redisstore"
)

// offsetClock is the system clock moved by d: a host whose clock is wrong.
type offsetClock struct{ d time.Duration }

func (c offsetClock) Now() time.Time                         { return time.Now().Add(c.d) }
func (c offsetClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// TestSkewedClocksOneHolder: three workers, each with a client of its own
// and a clock that differs from the others' by minutes (10 behind, 3 and
// 10 ahead: far past the one-minute lease), run one key. While the worker
// whose clock is behind holds it, the two ahead get ErrInProgress and do
// not run fn, as the lease holds on the server's clock; the holder's done
// mark is accepted, and the key ran once.
func TestSkewedClocksOneHolder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a := openStore(t, newClient(t))
	var workers []*redisstore.Store
	for range 2 {
		s, err := redisstore.New(ctx, newClient(t), redisstore.WithPrefix(a.Prefix()))
		if err != nil {
			t.Fatal(err)
		}
		workers = append(workers, s)
	}
	k := idem.Key{Job: "skew", Period: "2026-10-27"}
	for _, mode := range []struct {
		name string
		opt  func() idem.Option
	}{
		{"at-least-once", idem.AtLeastOnce},
		{"at-most-once", idem.AtMostOnce},
	} {
		k.Job = "skew-" + mode.name
		ran := 0
		started, release := make(chan struct{}), make(chan struct{})
		aErr := make(chan error, 1)
		go func() {
			aErr <- a.Run(ctx, k, func(context.Context) error {
				ran++
				close(started)
				<-release
				return nil
			}, mode.opt(), idem.WithClock(offsetClock{-10 * time.Minute}))
		}()
		testwait.Recv(t, started, "the behind worker's fn to start")
		for i, d := range []time.Duration{3 * time.Minute, 10 * time.Minute} {
			err := workers[i].Run(ctx, k, func(context.Context) error {
				t.Errorf("%s: the worker %v ahead ran fn while the lease held", mode.name, d)
				return nil
			}, mode.opt(), idem.WithClock(offsetClock{d}))
			if !errors.Is(err, idem.ErrInProgress) {
				t.Fatalf("%s: the worker %v ahead: %v; want ErrInProgress", mode.name, d, err)
			}
		}
		close(release)
		if err := testwait.Recv(t, aErr, "the behind worker's Run to return"); err != nil {
			t.Fatalf("%s: the holder: %v; want its done mark accepted", mode.name, err)
		}
		var res idem.Result
		if err := workers[1].Run(ctx, k, func(context.Context) error { ran++; return nil }, mode.opt(),
			idem.WithClock(offsetClock{10 * time.Minute}), idem.ReportTo(&res)); err != nil || res.Outcome != idem.AlreadyDone {
			t.Fatalf("%s: after the done mark: %v, %v; want AlreadyDone", mode.name, err, res.Outcome)
		}
		rec, _, err := a.Lookup(ctx, k)
		if ran != 1 || err != nil || rec.Status != idem.StatusDone || rec.Attempt != 1 {
			t.Fatalf("%s: fn ran %d times, record %+v (%v); want once, done by attempt 1", mode.name, ran, rec, err)
		}
	}
}
