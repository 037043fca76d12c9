package idem_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemstore"
	"github.com/idemgo/idem/internal/testwait"
)

// TestSchedulerRunsRerunAtOnce: a running Scheduler whose daily job is
// done runs a re-run of that period, requested through the store, at its
// next poll of the wake marks, not at the job's next due time (tomorrow).
func TestSchedulerRunsRerunAtOnce(t *testing.T) {
	l := openLedger(t, t.TempDir())
	s := idem.NewScheduler(l)
	var c calls
	if err := s.Add("daily", idem.Daily(time.UTC), c.fn); err != nil {
		t.Fatal(err)
	}
	startScheduler(t, s)
	key := idem.Key{Job: "daily", Period: idem.LastPeriod(idem.Daily(time.UTC), time.Now()).Name}
	testwait.Until(t, func() bool { return len(c.get()) == 1 }, "the Scheduler's first look to run %s", key)
	if _, err := idem.Rerun(context.Background(), l, idem.RerunRequest{Keys: []idem.Key{key}, RequestID: "fix-1", Reason: "data repaired"}); err != nil {
		t.Fatal(err)
	}
	testwait.Until(t, func() bool { return len(c.get()) == 2 }, "the Scheduler to run the re-run of %s", key)
	if got := c.get(); got[0] != key.Period || got[1] != key.Period {
		t.Errorf("runs %v, want %s twice", got, key.Period)
	}
}

// TestWakeNeedsWaker: idem.Wake on a store without wake marks (the state
// file) is an error naming the store and the interface; on the ledger it
// marks the job.
func TestWakeNeedsWaker(t *testing.T) {
	sf, err := idem.OpenStateFile(filepath.Join(t.TempDir(), "state"))
	if err != nil {
		t.Fatal(err)
	}
	err = idem.Wake(context.Background(), sf, "daily")
	if err == nil || !strings.Contains(err.Error(), "idemstore.Waker") || !strings.Contains(err.Error(), "Wake") {
		t.Errorf("Wake on a state file: %v, want an error naming Wake and idemstore.Waker", err)
	}
	l := openLedger(t, t.TempDir())
	if err := idem.Wake(context.Background(), l, "daily"); err != nil {
		t.Errorf("Wake on a ledger: %v", err)
	}
	if err := idem.Wake(context.Background(), l, ""); err == nil {
		t.Error("Wake of an empty job name: no error")
	}
}

// BenchmarkWakePoll is one poll of a Scheduler (idemstore.Waker.Woken)
// on a ledger with 1 or 1,000 jobs ever woken and nothing new: what every
// running Scheduler costs the ledger each idem.SchedulerWakePoll. A
// Lookup of a record is the yardstick.
func BenchmarkWakePoll(b *testing.B) {
	for _, n := range []int{1, 1000} {
		b.Run(fmt.Sprintf("marks=%d", n), func(b *testing.B) {
			l := openLedger(b, b.TempDir())
			ctx := context.Background()
			for i := range n {
				if err := idem.Wake(ctx, l, fmt.Sprintf("job-%04d", i)); err != nil {
					b.Fatal(err)
				}
			}
			st, err := idemstore.Of(l)
			if err != nil {
				b.Fatal(err)
			}
			w := st.(idemstore.Waker)
			_, mark, err := w.Woken(ctx, 0)
			if err != nil {
				b.Fatal(err)
			}
			for b.Loop() {
				if jobs, _, err := w.Woken(ctx, mark); err != nil || len(jobs) != 0 {
					b.Fatal(jobs, err)
				}
			}
		})
	}
	b.Run("lookup", func(b *testing.B) {
		l := openLedger(b, b.TempDir())
		ctx := context.Background()
		for b.Loop() {
			if _, _, err := l.Lookup(ctx, idem.Key{Job: "job", Period: "2026-10-27"}); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// wakeSpy is a ledger's store that tells, on read, each wake mark a
// Scheduler's poll read.
type wakeSpy struct {
	idemstore.CatchUpStore
	idemstore.Rerunner
	idemstore.Waker
	read chan []string
}

func (w *wakeSpy) Woken(ctx context.Context, after int64) ([]string, int64, error) {
	jobs, next, err := w.Waker.Woken(ctx, after)
	if len(jobs) > 0 {
		w.read <- jobs
	}
	return jobs, next, err
}

// TestSchedulerWokenWhileCatchingUp: a re-run requested while the job's
// catch-up runs, and read by the Scheduler's poll before it returns (the
// catch-up read the re-runs due at its start), is run as soon as the
// catch-up returns, not at the job's next due time.
func TestSchedulerWokenWhileCatchingUp(t *testing.T) {
	l := openLedger(t, t.TempDir())
	ctx := context.Background()
	day := idem.Daily(time.UTC)
	latest := idem.LastPeriod(day, time.Now())
	old := day.Prev(day.Prev(latest)) // done before the Scheduler starts
	if err := l.Run(ctx, idem.Key{Job: "daily", Period: old.Name}, func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
	st, err := idemstore.Of(l)
	if err != nil {
		t.Fatal(err)
	}
	spy := &wakeSpy{CatchUpStore: st.(idemstore.CatchUpStore), Rerunner: st.(idemstore.Rerunner), Waker: st.(idemstore.Waker),
		read: make(chan []string, 16)}
	started, release := make(chan string, 4), make(chan struct{})
	var c calls
	s := idem.NewScheduler(spy)
	if err := s.Add("daily", day, func(ctx context.Context, p idem.Period) error {
		started <- p.Name
		if p.Name == latest.Name {
			<-release // the catch-up runs until the test lets it end
		}
		return c.fn(ctx, p)
	}); err != nil {
		t.Fatal(err)
	}
	startScheduler(t, s)
	if p := testwait.Recv(t, started, "the first catch-up to run %s", latest.Name); p != latest.Name {
		t.Fatalf("the first catch-up ran %s, want the latest due period %s", p, latest.Name)
	}
	key := idem.Key{Job: "daily", Period: old.Name}
	if _, err := idem.Rerun(ctx, l, idem.RerunRequest{Keys: []idem.Key{key}, RequestID: "fix-1", Reason: "data repaired"}); err != nil {
		t.Fatal(err)
	}
	if jobs := testwait.Recv(t, spy.read, "the Scheduler's poll to read the re-run's wake mark"); fmt.Sprint(jobs) != "[daily]" {
		t.Fatalf("the poll read %v, want [daily]", jobs)
	}
	close(release)
	testwait.Until(t, func() bool { return len(c.get()) == 2 }, "the Scheduler to run the re-run of %s after its catch-up", key)
	if got := c.get(); got[1] != old.Name {
		t.Errorf("runs %v, want %s then the re-run of %s", got, latest.Name, old.Name)
	}
}
