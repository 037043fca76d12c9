package idemtest_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemstore"
	"github.com/idemgo/idem/idemtest"
	"github.com/idemgo/idem/internal/crashcheck"
)

// TestCrashKitOnEveryStore runs the README's "Testing your own job" on the
// root module's stores, the SQLite ledger and the state file (pgledger and
// redisstore run it in their modules), with the job's own lease of two
// hours and with WaitForTurn; and checks that a job whose fn fails returns
// at once from Crash and Recover, one attempt per call (crashcheck.All).
func TestCrashKitOnEveryStore(t *testing.T) {
	t.Parallel()
	stores := map[string]crashcheck.Open{
		"sqlite": func(t *testing.T) crashcheck.Store {
			l, err := idem.OpenLedger(filepath.Join(t.TempDir(), "ledger.db"))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { l.Close() })
			return l
		},
		"statefile": func(t *testing.T) crashcheck.Store {
			s, err := idem.OpenStateFile(filepath.Join(t.TempDir(), "state.json"))
			if err != nil {
				t.Fatal(err)
			}
			return s
		},
	}
	for name, open := range stores {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			crashcheck.All(t, open)
		})
	}
}

// TestCrashLeavesAttemptAsKillWould: the attempt Crash stops is left as a
// SIGKILL leaves it (running, its lease of an hour held on the job's
// clock), under an owner of its own that HolderGone reports ended; Recover
// takes it over at once as a dead holder's attempt, without moving the
// clock: AtMostOnce settles it unknown with the note that its process
// died.
func TestCrashLeavesAttemptAsKillWould(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	key := idem.Key{Job: "pay", Period: "2026-10-27"}
	c := &idemtest.Crash{Point: idemtest.AfterFn, Clock: idemtest.NewClock(time.Date(2026, 10, 28, 2, 0, 0, 0, time.UTC))}
	l, err := idem.OpenLedger(filepath.Join(t.TempDir(), "ledger.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var owners []string
	job := func(ctx context.Context) error {
		return l.Run(ctx, key, func(ctx context.Context) error {
			info, _ := idem.InfoFrom(ctx)
			owners = append(owners, info.Owner)
			return nil
		}, idem.AtMostOnce(), idem.WithLease(time.Hour), c.Option())
	}
	if reached, err := c.Crash(job); !reached || err != nil {
		t.Fatalf("Crash: reached %v, err %v", reached, err)
	}
	rec, ok, err := l.Lookup(ctx, key)
	if err != nil || !ok || rec.Status != idem.StatusRunning || len(owners) != 1 || rec.Owner != owners[0] ||
		rec.Owner == idemstore.Owner() || !rec.LeaseUntil.After(c.Clock.Now()) || !idemstore.HolderGone(rec.Owner) {
		t.Fatalf("after the crash: record %+v, %v, %v; fn's owner %q, this process %q, HolderGone %v; want running under fn's owner, not this process's, lease held, holder gone",
			rec, ok, err, owners, idemstore.Owner(), idemstore.HolderGone(rec.Owner))
	}
	crashed, now := rec.Owner, c.Clock.Now()
	if err := c.Recover(job); !errors.Is(err, idem.ErrUnknownOutcome) {
		t.Fatalf("Recover: %v, want ErrUnknownOutcome (AtMostOnce, the crashed attempt may have had its effect)", err)
	}
	rec, _, err = l.Lookup(ctx, key)
	if err != nil || rec.Status != idem.StatusUnknown || rec.Attempt != 2 || !strings.Contains(rec.LastError, "its process died") ||
		!strings.Contains(rec.LastError, crashed) || !c.Clock.Now().Equal(now) || len(owners) != 1 {
		t.Fatalf("after Recover: record %+v, %v; clock moved by %v; fn ran %d times; want unknown by attempt 2, noting that %s died, clock unmoved, fn run once",
			rec, err, c.Clock.Now().Sub(now), len(owners), crashed)
	}
}
