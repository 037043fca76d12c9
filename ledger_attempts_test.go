package idem_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemstore"
	"github.com/idemgo/idem/internal/testwait"
)

// history is key's History on l, as `idem show` and the operators' page
// read it.
func history(t *testing.T, l *idem.Ledger, key idem.Key) []idemstore.AttemptRecord {
	t.Helper()
	s, err := idemstore.Of(l)
	if err != nil {
		t.Fatal(err)
	}
	h, err := s.(idemstore.Historian).History(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	return h.Attempts
}

// archived is how many rows idem_attempts holds for key: the attempts
// whose record has moved on since they ended (and the abandoned ones).
func archived(t *testing.T, l *idem.Ledger, key idem.Key) int {
	t.Helper()
	var n int
	if err := l.DB().QueryRow(`SELECT count(*) FROM idem_attempts WHERE job=? AND period=?`, key.Job, key.Period).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// attemptsText is a history's attempts as "revision/attempt/outcome[:error]"
// words.
func attemptsText(as []idemstore.AttemptRecord) string {
	var w []string
	for _, a := range as {
		s := fmt.Sprintf("%d/%d/%s", a.Revision, a.Attempt, a.Outcome)
		if a.Error != "" {
			s += ":" + a.Error
		}
		w = append(w, s)
	}
	return strings.Join(w, " ")
}

// checkTimes fails unless every attempt has an owner and started <= ended.
func checkTimes(t *testing.T, key idem.Key, as []idemstore.AttemptRecord) {
	t.Helper()
	for _, a := range as {
		if a.Owner == "" || a.Started.IsZero() || a.Ended.Before(a.Started) {
			t.Errorf("%s: attempt %+v: want an owner and started <= ended", key, a)
		}
	}
}

// TestAttemptHistory: every attempt that ends is in its key's History with
// its outcome, error, owner and times (Run done, Run failed, then parked,
// RunTx done in its single transaction); a Run done writes no row of
// idem_attempts (its record holds its attempt); and Prune deletes the
// pruned keys' history.
func TestAttemptHistory(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l := openLedger(t, t.TempDir())
	const job = "hist"
	k1, k2, k3 := idem.Key{Job: job, Period: "2026-01-01"}, idem.Key{Job: job, Period: "2026-01-02"}, idem.Key{Job: job, Period: "2026-01-03"}
	if err := l.Run(ctx, k1, func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	if err := l.Run(ctx, k2, func(context.Context) error { return boom },
		idem.WithBackoff(idem.MaxAttempts(2, idem.Constant(time.Millisecond)))); !errors.Is(err, boom) {
		t.Fatalf("Run of a failing fn: %v, want boom", err)
	}
	if err := l.RunTx(ctx, k3, func(context.Context, *sql.Tx) error { return nil }); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		key      idem.Key
		want     string
		archived int
	}{
		{k1, "0/1/done", 0},
		{k2, "0/1/failed:boom 0/2/parked:boom", 1},
		{k3, "0/1/done", 0},
	} {
		h := history(t, l, c.key)
		if got := attemptsText(h); !historyMatches(got, c.want) {
			t.Errorf("%s: history %q, want %q", c.key, got, c.want)
		}
		checkTimes(t, c.key, h)
		if n := archived(t, l, c.key); n != c.archived {
			t.Errorf("%s: %d rows in idem_attempts, want %d (the last attempt is on the record)", c.key, n, c.archived)
		}
	}
	if _, err := l.Prune(ctx, job, "2026-01-01"); err != nil {
		t.Fatal(err)
	}
	for _, k := range []idem.Key{k1} {
		if h := history(t, l, k); len(h) != 0 || archived(t, l, k) != 0 {
			t.Errorf("%s after Prune: history %q, %d rows; want none", k, attemptsText(h), archived(t, l, k))
		}
	}
	if got := attemptsText(history(t, l, k2)); !historyMatches(got, "0/1/failed:boom 0/2/parked:boom") {
		t.Errorf("%s after a Prune of the period before it: %q", k2, got)
	}
	if got := attemptsText(history(t, l, k3)); got != "0/1/done" {
		t.Errorf("%s after a Prune of the periods before it: %q, want 0/1/done", k3, got)
	}
}

// historyMatches reports whether got is want, each error in got allowed
// to say more than want's (a parked attempt's error names its attempts).
func historyMatches(got, want string) bool {
	g, w := strings.Fields(got), strings.Fields(want)
	if len(g) != len(w) {
		return false
	}
	for i := range g {
		gh, ge, _ := strings.Cut(g[i], ":")
		wh, we, _ := strings.Cut(w[i], ":")
		if gh != wh || !strings.Contains(ge, we) || (we == "") != (ge == "") {
			return false
		}
	}
	return true
}

// TestAttemptHistoryMovesOn: the attempt a record holds goes into
// idem_attempts, unchanged, when the record moves on, by every write that
// moves it: a retry's claim, a takeover (abandoned), Resolve, a re-run of a
// done period and a re-run that waited for a running attempt (the trigger
// idem_rerun_after_done); a RunTx whose fn fails (its row went in done,
// then back to running) leaves no done attempt; the row a version-8 process
// writes when its attempt ends is not doubled.
func TestAttemptHistoryMovesOn(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l := openLedger(t, t.TempDir())
	s := store(t, l)
	ok := func(context.Context) error { return nil }
	// One attempt a call, the next one due at once.
	once := []idem.Option{idem.OneAttempt(), idem.WithBackoff(idem.Constant(0))}
	boom := errors.New("boom")
	fail := func(context.Context) error { return boom }
	check := func(key idem.Key, step, want string) {
		t.Helper()
		h := history(t, l, key)
		if got := attemptsText(h); !historyMatches(got, want) {
			t.Errorf("%s after %s: history %q, want %q", key, step, got, want)
		}
		checkTimes(t, key, h)
	}
	rerun := func(key idem.Key, id string) {
		t.Helper()
		if _, err := idem.Rerun(ctx, l, idem.RerunRequest{Keys: []idem.Key{key}, RequestID: id, Reason: "test"}); err != nil {
			t.Fatal(err)
		}
	}

	t.Run("retry and re-run", func(t *testing.T) {
		k := idem.Key{Job: "moves", Period: "retry"}
		if err := l.Run(ctx, k, fail, once...); !errors.Is(err, boom) {
			t.Fatalf("Run: %v, want boom", err)
		}
		check(k, "a failed attempt", "0/1/failed:boom")
		if err := l.Run(ctx, k, ok); err != nil {
			t.Fatal(err)
		}
		check(k, "the retry", "0/1/failed:boom 0/2/done")
		rerun(k, "r1")
		check(k, "a re-run request", "0/1/failed:boom 0/2/done")
		if err := l.Resolve(ctx, k, idem.ResolveRetry); err != nil {
			t.Fatal(err)
		}
		check(k, "Resolve of the re-run's record", "0/1/failed:boom 0/2/done")
		if err := l.Run(ctx, k, ok); err != nil {
			t.Fatal(err)
		}
		check(k, "the re-run", "0/1/failed:boom 0/2/done 1/3/done")
	})

	t.Run("takeover", func(t *testing.T) {
		k := idem.Key{Job: "moves", Period: "takeover"}
		now := time.Now()
		if cl, err := s.Claim(ctx, idemstore.ClaimRequest{Key: k, Owner: "a", Now: now, Lease: time.Minute}); err != nil || cl.State != idemstore.ClaimAcquired {
			t.Fatalf("claim %+v, %v", cl, err)
		}
		check(k, "a claim", "")
		cl, err := s.Claim(ctx, idemstore.ClaimRequest{Key: k, Owner: "b", Now: now.Add(2 * time.Minute), Lease: time.Minute})
		if err != nil || cl.State != idemstore.ClaimAcquired {
			t.Fatalf("takeover %+v, %v", cl, err)
		}
		if err := s.Finish(ctx, k, cl.Attempt, idemstore.End{Status: idem.StatusDone, Now: now.Add(3 * time.Minute)}); err != nil {
			t.Fatal(err)
		}
		check(k, "the takeover's done mark", "0/1/abandoned 0/2/done")
	})

	t.Run("resolve", func(t *testing.T) {
		for _, c := range []struct {
			name string
			to   idem.Resolution
			want string // after Resolve, then a Run
		}{
			{"done", idem.ResolveDone, "0/1/failed:boom 0/2/parked:boom"},
			{"skip", idem.ResolveSkip, "0/1/failed:boom 0/2/parked:boom"},
			{"retry", idem.ResolveRetry, "0/1/failed:boom 0/2/parked:boom 0/3/done"},
		} {
			k := idem.Key{Job: "moves", Period: "resolve-" + c.name}
			if err := l.Run(ctx, k, fail, idem.WithBackoff(idem.MaxAttempts(2, idem.Constant(time.Millisecond)))); !errors.Is(err, boom) {
				t.Fatalf("Run: %v, want boom", err)
			}
			check(k, "parked", "0/1/failed:boom 0/2/parked:boom")
			if err := l.Resolve(ctx, k, c.to); err != nil {
				t.Fatal(err)
			}
			// The parked attempt keeps its own outcome and error, not the
			// resolution's.
			check(k, "Resolve "+c.name, "0/1/failed:boom 0/2/parked:boom")
			if err := l.Run(ctx, k, ok); err != nil {
				t.Fatal(err)
			}
			check(k, "Resolve "+c.name+" and a Run", c.want)
		}
	})

	t.Run("run tx fails, then done", func(t *testing.T) {
		k := idem.Key{Job: "moves", Period: "runtx"}
		if err := l.RunTx(ctx, k, func(context.Context, *sql.Tx) error { return boom }, once...); !errors.Is(err, boom) {
			t.Fatalf("RunTx: %v, want boom", err)
		}
		check(k, "RunTx's failure", "0/1/failed:boom")
		if _, err := idem.RunTxValue(ctx, l, k, func(context.Context, *sql.Tx) (string, error) { return "v", nil }); err != nil {
			t.Fatal(err)
		}
		check(k, "RunTx done with a value", "0/1/failed:boom 0/2/done")
		k = idem.Key{Job: "moves", Period: "runtx-value"}
		if _, err := idem.RunTxValue(ctx, l, k, func(context.Context, *sql.Tx) (string, error) { return "v", nil }); err != nil {
			t.Fatal(err)
		}
		check(k, "a fresh RunTx with a value", "0/1/done")
		if n := archived(t, l, k); n != 0 {
			t.Errorf("%s: %d rows in idem_attempts after a fresh RunTx, want 0 (its stored value moves nothing)", k, n)
		}
	})

	t.Run("re-run after the run", func(t *testing.T) {
		k := idem.Key{Job: "moves", Period: "after-run"}
		started, release := make(chan struct{}), make(chan struct{})
		errc := make(chan error, 1)
		go func() {
			errc <- l.Run(ctx, k, func(context.Context) error { close(started); <-release; return nil })
		}()
		testwait.Recv(t, started, "the run's fn to start")
		rerun(k, "r-after")
		close(release)
		if err := testwait.Recv(t, errc, "the run to return"); err != nil {
			t.Fatal(err)
		}
		// The done mark made the record revision 1 at once: the done
		// attempt went into idem_attempts in the same statement.
		check(k, "the done mark", "0/1/done")
		if err := l.Run(ctx, k, ok); err != nil {
			t.Fatal(err)
		}
		check(k, "the re-run", "0/1/done 1/2/done")
		if n := archived(t, l, k); n != 1 {
			t.Errorf("%s: %d rows in idem_attempts, want 1", k, n)
		}
	})

	t.Run("a version-8 row", func(t *testing.T) {
		k := idem.Key{Job: "moves", Period: "v8"}
		if err := l.Run(ctx, k, fail, once...); !errors.Is(err, boom) {
			t.Fatalf("Run: %v, want boom", err)
		}
		// What a version-8 process writes as its attempt ends: the row,
		// in the outcome's transaction.
		if _, err := l.DB().ExecContext(ctx, `INSERT INTO idem_attempts(job, period, revision, attempt, outcome, error, owner, started, ended)
			SELECT job, period, revision, attempt, status, last_error, owner, started, updated FROM idem_runs WHERE job=? AND period=?`,
			k.Job, k.Period); err != nil {
			t.Fatal(err)
		}
		check(k, "a version-8 row", "0/1/failed:boom")
		if err := l.Run(ctx, k, ok); err != nil {
			t.Fatal(err)
		}
		check(k, "the retry", "0/1/failed:boom 0/2/done")
	})
}
