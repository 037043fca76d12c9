package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemstore"
	"github.com/idemgo/idem/idemtest"
	"github.com/idemgo/idem/redisstore"
)

func rerunReq(id string, keys ...idem.Key) idem.RerunRequest {
	return idem.RerunRequest{Keys: keys, RequestID: id, Reason: "flow table corrected", By: "ops"}
}

// TestRerunDoneMarkPromotes: a request that came while an attempt held the
// period gives the period its revision in the script of the attempt's
// done mark (runnable at once, the request's note), and that done mark
// sent again (go-redis re-sends a command whose reply was lost) still
// succeeds: the attempt's end stands.
func TestRerunDoneMarkPromotes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openStore(t, newClient(t))
	key := idem.Key{Job: "settle", Period: "2026-10-01"}
	c, err := s.Claim(ctx, idemstore.ClaimRequest{Key: key, Owner: "test", Now: time.Now(), Lease: time.Minute})
	if err != nil || c.State != idemstore.ClaimAcquired {
		t.Fatalf("Claim = %+v, %v", c, err)
	}
	req := rerunReq("during")
	req.Keys = []idem.Key{key}
	if out, err := s.Rerun(ctx, req); err != nil || out[0].State != idem.RerunAfterRun || out[0].Revision != 1 {
		t.Fatalf("Rerun while running = %+v, %v; want after the run, revision 1", out, err)
	}
	if rec, _, _ := s.Lookup(ctx, key); rec.Status != idem.StatusRunning || rec.Revision != 0 {
		t.Fatalf("before the done mark: %+v, want running, revision 0", rec)
	}
	for i := range 2 {
		if err := s.Finish(ctx, key, c.Attempt, idemstore.End{Status: idem.StatusDone, Now: time.Now()}); err != nil {
			t.Fatalf("done mark %d: %v", i+1, err)
		}
	}
	rec, _, err := s.Lookup(ctx, key)
	if err != nil || rec.Status != idem.StatusFailed || rec.Revision != 1 || rec.Failures != 0 || !rec.NotBefore.IsZero() ||
		rec.LastError != idemstore.RerunNote(req, 1) {
		t.Errorf("after the done mark: %+v (%v); want failed (runnable at once), revision 1, no failure, last error %q",
			rec, err, idemstore.RerunNote(req, 1))
	}
	c2, err := s.Claim(ctx, idemstore.ClaimRequest{Key: key, Owner: "test", Now: time.Now(), Lease: time.Minute})
	if err != nil || c2.State != idemstore.ClaimAcquired || c2.Record.Revision != 1 || c2.Attempt <= c.Attempt {
		t.Errorf("the re-run's claim = %+v, %v; want acquired, revision 1, a higher attempt than %d", c2, err, c.Attempt)
	}
}

// TestRerunsDueAndPrune: RerunsDue lists the periods at or before its
// bound whose re-run has not run, oldest first; Prune deletes the pruned
// periods' requests, and a pruned period is refused.
func TestRerunsDueAndPrune(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := newClient(t)
	s := openStore(t, c)
	const job = "due"
	key := func(p string) idem.Key { return idem.Key{Job: job, Period: p} }
	noop := func(context.Context) error { return nil }
	for _, p := range []string{"2026-10-01", "2026-10-02", "2026-10-03"} {
		if err := s.Run(ctx, key(p), noop); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Rerun(ctx, rerunReq("x", key("2026-10-03"), key("2026-10-01"))); err != nil {
		t.Fatal(err)
	}
	for through, want := range map[string]string{"2026-10-02": "[2026-10-01]", "2026-10-03": "[2026-10-01 2026-10-03]", "2026-09-30": "[]"} {
		if got, err := s.RerunsDue(ctx, job, through); err != nil || fmt.Sprint(got) != want {
			t.Errorf("RerunsDue through %s = %v, %v; want %s", through, got, err, want)
		}
	}
	if got, err := s.RerunsDue(ctx, "other", "2026-10-03"); err != nil || len(got) != 0 {
		t.Errorf("RerunsDue of another job = %v, %v; want none", got, err)
	}
	for _, p := range []string{"2026-10-01", "2026-10-03"} {
		if err := s.Run(ctx, key(p), noop); err != nil {
			t.Fatal(err)
		}
	}
	if got, err := s.RerunsDue(ctx, job, "2026-10-03"); err != nil || len(got) != 0 {
		t.Errorf("RerunsDue after the re-runs = %v, %v; want none", got, err)
	}
	if _, err := s.Prune(ctx, job, "2026-10-02"); err != nil {
		t.Fatal(err)
	}
	keys, err := c.Keys(ctx, "{"+s.Prefix()+"}:rerun:*").Result()
	if err != nil || len(keys) != 1 || !strings.HasSuffix(keys[0], ":2026-10-03") {
		t.Errorf("request keys after Prune through 2026-10-02: %q (%v), want 2026-10-03's alone", keys, err)
	}
	if left, err := c.ZRange(ctx, "{"+s.Prefix()+"}:reruns:"+job, 0, -1).Result(); err != nil || fmt.Sprint(left) != "[2026-10-03]" {
		t.Errorf("the job's re-run periods after Prune: %q (%v), want [2026-10-03]", left, err)
	}
	if _, err := s.Rerun(ctx, rerunReq("y", key("2026-10-01"))); !errors.Is(err, idem.ErrNotRerunnable) || !strings.Contains(err.Error(), "pruned") {
		t.Errorf("Rerun of a pruned period = %v, want ErrNotRerunnable saying it was pruned", err)
	}
}

// TestRerunCatchUp: a catch-up on Redis runs the periods behind its cursor
// that a request made runnable, once each, then those due after it.
func TestRerunCatchUp(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openStore(t, newClient(t))
	sched := idem.Daily(time.UTC)
	clk := idemtest.NewClock(time.Date(2026, 10, 4, 2, 0, 0, 0, time.UTC))
	ran := map[string][]int64{}
	fn := func(ctx context.Context, p idem.Period) error {
		info, _ := idem.InfoFrom(ctx)
		ran[p.Name] = append(ran[p.Name], info.Revision)
		return nil
	}
	opts := []idem.Option{idem.WithClock(clk), idem.Since(time.Date(2026, 10, 1, 0, 0, 0, 0, time.UTC))}
	if _, err := idem.CatchUp(ctx, s, "settle", sched, fn, opts...); err != nil {
		t.Fatal(err)
	}
	if _, err := idem.Rerun(ctx, s, rerunReq("oct", idem.Key{Job: "settle", Period: "2026-10-01"}, idem.Key{Job: "settle", Period: "2026-10-02"})); err != nil {
		t.Fatal(err)
	}
	clk.Advance(24 * time.Hour)
	for range 2 {
		if _, err := idem.CatchUp(ctx, s, "settle", sched, fn, opts...); err != nil {
			t.Fatal(err)
		}
	}
	want := map[string][]int64{"2026-10-01": {0, 1}, "2026-10-02": {0, 1}, "2026-10-03": {0}, "2026-10-04": {0}}
	if fmt.Sprint(ran) != fmt.Sprint(want) {
		t.Errorf("fn ran for (period: revisions) %v, want %v", ran, want)
	}
}

var _ idemstore.Rerunner = (*redisstore.Store)(nil)
