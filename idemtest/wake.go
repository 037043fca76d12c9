package idemtest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemstore"
)

// testWake checks a store's wake marks (idemstore.Waker), if it has them:
// Wake, Resolve and Rerun mark their jobs; Woken returns the jobs marked
// after a mark, once; and marks written at once by many writers are
// numbered so that a reader polling meanwhile misses none.
func testWake(t *testing.T, h Harness) {
	ctx := context.Background()
	clk := NewClock(start)
	s := h.open(t, clk)
	w, ok := s.(idemstore.Waker)
	if !ok {
		t.Skipf("the store %T is no idemstore.Waker", s)
	}
	_, mark, err := w.Woken(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	// woken reads the jobs marked since the last read.
	woken := func(what string) []string {
		t.Helper()
		jobs, next, err := w.Woken(ctx, mark)
		if err != nil {
			t.Fatalf("Woken after %s: %v", what, err)
		}
		if next < mark || (len(jobs) > 0) != (next > mark) {
			t.Fatalf("Woken after %s: jobs %v, mark %d → %d", what, jobs, mark, next)
		}
		mark = next
		slices.Sort(jobs)
		return jobs
	}
	want := func(what string, got []string, jobs ...string) {
		t.Helper()
		if fmt.Sprint(got) != fmt.Sprint(jobs) {
			t.Errorf("jobs woken by %s: %v, want %v", what, got, jobs)
		}
	}
	want("nothing", woken("nothing"))
	if err := w.Wake(ctx, "report"); err != nil {
		t.Fatal(err)
	}
	want("Wake(report)", woken("Wake(report)"), "report")
	want("nothing more", woken("nothing more"))
	for _, job := range []string{"settle", "report", "settle"} {
		if err := w.Wake(ctx, job); err != nil {
			t.Fatal(err)
		}
	}
	want("Wake(settle), Wake(report), Wake(settle)", woken("three wakes"), "report", "settle")
	if err := w.Wake(ctx, ""); err == nil {
		t.Error("Wake of an empty job name: no error")
	}

	// Resolve marks the job it changed.
	parked := idem.Key{Job: "parked", Period: "2026-10-27"}
	err = idem.RunOn(ctx, s, parked, func(context.Context) error { return idem.Permanent(errors.New("bad input")) }, idem.WithClock(clk))
	if !errors.Is(err, idem.ErrParked) {
		t.Fatalf("parking %s: %v", parked, err)
	}
	want("a run that parked", woken("a run"))
	if err := s.Resolve(ctx, parked, idem.ResolveRetry); err != nil {
		t.Fatal(err)
	}
	want("Resolve(parked)", woken("Resolve"), "parked")
	if err := s.Resolve(ctx, idem.Key{Job: "none", Period: "2026-10-27"}, idem.ResolveRetry); err == nil {
		t.Fatal("Resolve of a key with no record: no error")
	}
	want("a refused Resolve", woken("a refused Resolve"))

	// Rerun marks the jobs of its periods.
	if _, ok := s.(idemstore.Rerunner); ok {
		done := idem.Key{Job: "rerun", Period: "2026-10-27"}
		if err := idem.RunOn(ctx, s, done, func(context.Context) error { return nil }, idem.WithClock(clk)); err != nil {
			t.Fatal(err)
		}
		want("a run", woken("a run"))
		if _, err := idem.Rerun(ctx, s, rerunReq("wake", "repair", done)); err != nil {
			t.Fatal(err)
		}
		want("Rerun", woken("Rerun"), "rerun")
	}

	wakeMany(t, w, &mark, woken)
}

// wakeMany: many writers at once, a reader polling meanwhile (from *mark,
// which it moves): every job is read, by the poll or by woken after it.
func wakeMany(t *testing.T, w idemstore.Waker, mark *int64, woken func(string) []string) {
	ctx := context.Background()
	const writers = 24
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for i := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := w.Wake(ctx, fmt.Sprintf("many-%02d", i)); err != nil {
				errs <- err
			}
		}()
	}
	stop := make(chan struct{})
	seen := map[string]bool{}
	polled := make(chan error, 1)
	go func() {
		for {
			jobs, next, err := w.Woken(ctx, *mark)
			if err != nil {
				polled <- err
				return
			}
			*mark = next
			for _, j := range jobs {
				seen[j] = true
			}
			select {
			case <-stop:
				polled <- nil
				return
			default:
			}
		}
	}()
	wg.Wait()
	close(stop)
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if err := <-polled; err != nil {
		t.Fatal(err)
	}
	for _, j := range woken("the last poll") {
		seen[j] = true
	}
	for i := range writers {
		if j := fmt.Sprintf("many-%02d", i); !seen[j] {
			t.Errorf("%s was woken, but no poll returned it (marks out of commit order?)", j)
		}
	}
}
