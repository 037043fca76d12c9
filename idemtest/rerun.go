package idemtest

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemstore"
	"github.com/idemgo/idem/internal/testwait"
)

// testRerun checks a store's re-runs of done periods (idem.Rerun), if it
// is an idemstore.Rerunner.
func testRerun(t *testing.T, h Harness) {
	clk := NewClock(start)
	s := h.open(t, clk)
	if _, ok := s.(idemstore.Rerunner); !ok {
		t.Skipf("the store %T is no idemstore.Rerunner", s)
	}
	t.Run("DonePeriod", func(t *testing.T) { testRerunDone(t, h) })
	t.Run("Refused", func(t *testing.T) { testRerunRefused(t, h) })
	t.Run("WhileRunning", func(t *testing.T) { testRerunWhileRunning(t, h, 1) })
	t.Run("SentAgainWhileRunning", func(t *testing.T) { testRerunWhileRunning(t, h, 2) })
	t.Run("CrashPoints", func(t *testing.T) { testRerunCrashPoints(t, h) })
	t.Run("SentAgainWithMoreKeys", func(t *testing.T) { testRerunSentAgainWithMoreKeys(t, h) })
}

// testRerunSentAgainWithMoreKeys: a request sent again that names a key
// it did not name at first (a dependent that ran since:
// idem.RerunWithDependents) re-runs nothing: every key is seen, the new
// one at its current revision, still done.
func testRerunSentAgainWithMoreKeys(t *testing.T, h Harness) {
	ctx := context.Background()
	clk := NewClock(start)
	s := h.open(t, clk)
	a, b := idem.Key{Job: "rerun-up", Period: "2026-10-01"}, idem.Key{Job: "rerun-down", Period: "2026-10-01"}
	noop := func(context.Context) error { return nil }
	for _, k := range []idem.Key{a, b} {
		if err := idem.RunOn(ctx, s, k, noop, idem.WithClock(clk)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := idem.Rerun(ctx, s, rerunReq("req-1", "repair", a)); err != nil {
		t.Fatal(err)
	}
	out, err := idem.Rerun(ctx, s, rerunReq("req-1", "repair", a, b))
	if err != nil || len(out) != 2 || out[0].State != idem.RerunSeen || out[0].Revision != 1 || out[1].State != idem.RerunSeen || out[1].Revision != 0 {
		t.Fatalf("sent again with one more key: %+v, %v; want both seen, at revisions 1 and 0", out, err)
	}
	if rec, ok, err := s.Lookup(ctx, b); err != nil || !ok || rec.Status != idem.StatusDone || rec.Revision != 0 {
		t.Fatalf("the key added: %+v, %v, %v; want done at revision 0", rec, ok, err)
	}
}

// testRerunCrashPoints: a re-run's run stopped at each crash point, as a
// SIGKILL would, then recovered by the next trigger, keeps its mode's
// promise for the revision: at least once, one more effect or more, the
// period done; at most once, never two more, done with one or unknown.
func testRerunCrashPoints(t *testing.T, h Harness) {
	for _, mode := range []string{"at-least-once", "at-most-once"} {
		for _, p := range idemstore.Points() {
			t.Run(mode+"/"+string(p), func(t *testing.T) {
				ctx := context.Background()
				clk := NewClock(start)
				s := h.open(t, clk)
				d := newDownstream()
				k := idem.Key{Job: "rerun-crash", Period: "2026-10-27"}
				opts := []idem.Option{idem.WithClock(clk)}
				if mode == "at-most-once" {
					opts = append(opts, idem.AtMostOnce())
				}
				if err := idem.RunOn(ctx, s, k, d.apply, opts...); err != nil {
					t.Fatal(err)
				}
				if _, err := idem.Rerun(ctx, s, rerunReq("crash", "repair", k)); err != nil {
					t.Fatal(err)
				}
				err := idem.RunOn(CrashAt(ctx, p), s, k, d.apply, opts...)
				if crashed := errors.Is(err, ErrCrashed); !crashed {
					if err != nil {
						t.Fatalf("crashing re-run: %v", err)
					}
					t.Skipf("the store has no crash point %s", p)
				}
				h.expire(t, s, clk)
				err = idem.RunOn(ctx, s, k, d.apply, opts...)
				n := d.count(k) - 1 // the re-run's effects
				rec, _, lerr := s.Lookup(ctx, k)
				if lerr != nil {
					t.Fatal(lerr)
				}
				switch {
				case mode == "at-least-once" && (err != nil || rec.Status != idem.StatusDone || n < 1 || rec.Revision != 1):
					t.Fatalf("recovery: %v, %s revision %d, re-run effects %d; want done, revision 1, at least 1", err, rec.Status, rec.Revision, n)
				case mode == "at-most-once" && n > 1:
					t.Fatalf("the re-run's fn ran %d times", n)
				case mode == "at-most-once" && rec.Status == idem.StatusDone && (n != 1 || err != nil):
					t.Fatalf("done after the re-run with %d effects (%v), want 1", n, err)
				case mode == "at-most-once" && rec.Status != idem.StatusDone && (rec.Status != idem.StatusUnknown || !errors.Is(err, idem.ErrUnknownOutcome)):
					t.Fatalf("after the re-run: %s (%v), want done or unknown", rec.Status, err)
				}
			})
		}
	}
}

func rerunReq(id, reason string, keys ...idem.Key) idem.RerunRequest {
	return idem.RerunRequest{Keys: keys, RequestID: id, Reason: reason, By: "idemtest", Now: start}
}

// testRerunDone: a done period re-run on request runs fn once more, as
// revision 1, with the revision's request id and a higher attempt; later
// triggers and the same request sent again run nothing more; a second
// request makes revision 2.
func testRerunDone(t *testing.T, h Harness) {
	ctx := context.Background()
	clk := NewClock(start)
	s := h.open(t, clk)
	key := idem.Key{Job: "rerun", Period: "2026-10-01"}
	var infos []idem.Info
	run := func() {
		t.Helper()
		if err := idem.RunOn(ctx, s, key, func(ctx context.Context) error {
			info, _ := idem.InfoFrom(ctx)
			infos = append(infos, info)
			return nil
		}, idem.WithClock(clk)); err != nil {
			t.Fatal(err)
		}
	}
	lookup := func() idem.Record {
		t.Helper()
		rec, ok, err := s.Lookup(ctx, key)
		if err != nil || !ok {
			t.Fatalf("Lookup(%s) = %v, %v", key, ok, err)
		}
		return rec
	}
	run()
	run()
	out, err := idem.Rerun(ctx, s, rerunReq("req-1", "flow table corrected", key))
	if err != nil || len(out) != 1 || out[0].State != idem.RerunQueued || out[0].Revision != 1 {
		t.Fatalf("Rerun = %+v, %v; want queued as revision 1", out, err)
	}
	if rec := lookup(); rec.Status != idem.StatusFailed || rec.Revision != 1 || !strings.Contains(rec.LastError, "flow table corrected") || rec.Failures != 0 {
		t.Errorf("after Rerun: %+v; want failed (runnable), revision 1, no failure counted, the reason in LastError", rec)
	}
	run()
	run()
	if out, err := idem.Rerun(ctx, s, rerunReq("req-1", "flow table corrected", key)); err != nil || out[0].State != idem.RerunSeen || out[0].Revision != 1 {
		t.Fatalf("the same request again = %+v, %v; want seen, revision 1", out, err)
	}
	run()
	if len(infos) != 2 {
		t.Fatalf("fn ran %d times, want twice (the first run and the re-run)", len(infos))
	}
	if infos[0].Revision != 0 || infos[0].RequestID != key.RequestID() {
		t.Errorf("first run's Info = %+v, want revision 0 and the key's request id", infos[0])
	}
	if infos[1].Revision != 1 || infos[1].RequestID != key.RevisionRequestID(1) || infos[1].RequestID == key.RequestID() {
		t.Errorf("re-run's Info = %+v, want revision 1 and the revision's own request id %s", infos[1], key.RevisionRequestID(1))
	}
	if infos[1].Attempt <= infos[0].Attempt {
		t.Errorf("re-run's attempt %d, not above the first run's %d: fencing tokens must only grow", infos[1].Attempt, infos[0].Attempt)
	}
	if rec := lookup(); rec.Status != idem.StatusDone || rec.Revision != 1 {
		t.Errorf("after the re-run: %+v, want done, revision 1", rec)
	}
	if out, err := idem.Rerun(ctx, s, rerunReq("req-2", "report bug fixed", key)); err != nil || out[0].Revision != 2 {
		t.Fatalf("a second request = %+v, %v; want revision 2", out, err)
	}
	run()
	if len(infos) != 3 || infos[2].Revision != 2 {
		t.Errorf("after a second request fn ran %d times (last %+v), want a third run as revision 2", len(infos), infos[len(infos)-1])
	}
}

// testRerunRefused: periods that cannot run again as they are (parked,
// unknown, never run) are refused with the command that fits, and a
// request naming one changes none of its periods.
func testRerunRefused(t *testing.T, h Harness) {
	ctx := context.Background()
	clk := NewAutoClock(start)
	s := h.open(t, clk)
	done := idem.Key{Job: "rerun-refused", Period: "2026-10-01"}
	parked := idem.Key{Job: "rerun-refused", Period: "2026-10-02"}
	unknown := idem.Key{Job: "rerun-refused", Period: "2026-10-03"}
	never := idem.Key{Job: "rerun-refused", Period: "2026-10-04"}
	opts := []idem.Option{idem.WithClock(clk)}
	if err := idem.RunOn(ctx, s, done, func(context.Context) error { return nil }, opts...); err != nil {
		t.Fatal(err)
	}
	if err := idem.RunOn(ctx, s, parked, func(context.Context) error { return idem.Permanent(errors.New("bad account")) }, opts...); !errors.Is(err, idem.ErrParked) {
		t.Fatalf("parking: %v", err)
	}
	if err := idem.RunOn(ctx, s, unknown, func(context.Context) error { return errors.New("timeout") }, idem.WithClock(clk), idem.AtMostOnce()); !errors.Is(err, idem.ErrUnknownOutcome) {
		t.Fatalf("unknown: %v", err)
	}
	for _, c := range []struct {
		key  idem.Key
		want string
	}{{parked, "idem reset"}, {unknown, "idem resolve"}, {never, "idem run"}} {
		_, err := idem.Rerun(ctx, s, rerunReq("req-"+c.key.Period, "repair", done, c.key))
		if !errors.Is(err, idem.ErrNotRerunnable) || !strings.Contains(err.Error(), c.key.String()) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Rerun of %s = %v, want ErrNotRerunnable naming it and %q", c.key, err, c.want)
		}
	}
	if rec, _, err := s.Lookup(ctx, done); err != nil || rec.Status != idem.StatusDone || rec.Revision != 0 {
		t.Errorf("the done period named beside a refused one: %+v (%v), want unchanged (done, revision 0)", rec, err)
	}
	for _, bad := range []idem.RerunRequest{{Keys: []idem.Key{done}, Reason: "x"}, {Keys: []idem.Key{done}, RequestID: "x"}, {RequestID: "x", Reason: "x"}} {
		if _, err := idem.Rerun(ctx, s, bad); err == nil {
			t.Errorf("Rerun(%+v) = nil, want an error (a request id, a reason and a period are required)", bad)
		}
	}
}

// testRerunWhileRunning: a request that comes while an attempt holds the
// period re-runs it after that attempt ends done; sent again meanwhile
// (sends above 1), it is seen, and still waits for the attempt.
func testRerunWhileRunning(t *testing.T, h Harness, sends int) {
	ctx := context.Background()
	clk := NewClock(start)
	s := h.open(t, clk)
	key := idem.Key{Job: "rerun-running", Period: "2026-10-05"}
	ran := 0
	started, release := make(chan struct{}), make(chan struct{})
	errCh := make(chan error, 1)
	go func() {
		errCh <- idem.RunOn(ctx, s, key, func(context.Context) error {
			ran++
			close(started)
			<-release
			return nil
		}, idem.WithClock(clk))
	}()
	testwait.Recv(t, started, "the first attempt to start")
	for i := range sends {
		want := idem.RerunAfterRun
		if i > 0 {
			want = idem.RerunSeen
		}
		out, err := idem.Rerun(ctx, s, rerunReq("during", "corrected while it ran", key))
		if err != nil || out[0].State != want || out[0].Revision != 1 {
			t.Fatalf("Rerun %d while running = %+v, %v; want %v, revision 1", i+1, out, err, want)
		}
	}
	close(release)
	if err := testwait.Recv(t, errCh, "the first attempt to end"); err != nil {
		t.Fatal(err)
	}
	if rec, _, err := s.Lookup(ctx, key); err != nil || rec.Status != idem.StatusFailed || rec.Revision != 1 {
		t.Errorf("after the attempt ended: %+v (%v), want revision 1 runnable", rec, err)
	}
	var rev int64
	if err := idem.RunOn(ctx, s, key, func(ctx context.Context) error {
		info, _ := idem.InfoFrom(ctx)
		rev = info.Revision
		ran++
		return nil
	}, idem.WithClock(clk)); err != nil {
		t.Fatal(err)
	}
	if ran != 2 || rev != 1 {
		t.Errorf("fn ran %d times, the last as revision %d; want twice, revision 1", ran, rev)
	}
}
