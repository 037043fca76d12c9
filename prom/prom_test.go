package prom_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/idemgo/idem/guard"
	"github.com/idemgo/idem/idemtest"
	"github.com/idemgo/idem/limit"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/internal/schedtest"
	"github.com/idemgo/idem/internal/testwait"
	"github.com/idemgo/idem/prom"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// gathered is what a registry's Gather returned, by metric name and then by
// the metric's labels ("job=a,outcome=ran").
type gathered map[string]map[string]*dto.Metric

func gather(t *testing.T, reg *prometheus.Registry) gathered {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("Gather: %v", err)
	}
	g := gathered{}
	for _, mf := range mfs {
		byLabels := map[string]*dto.Metric{}
		for _, m := range mf.GetMetric() {
			s := ""
			for i, lp := range m.GetLabel() {
				if i > 0 {
					s += ","
				}
				s += lp.GetName() + "=" + lp.GetValue()
			}
			byLabels[s] = m
		}
		g[mf.GetName()] = byLabels
	}
	return g
}

// series is a metric's expected value: that of its series with labels
// ("job=a,outcome=ran").
type series struct {
	name, labels string
	want         float64
}

// expect checks the series of ws.
func (g gathered) expect(t *testing.T, ws []series) {
	t.Helper()
	for _, c := range ws {
		if got := g.value(c.name, c.labels); got != c.want {
			t.Errorf("%s{%s} = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
}

// value returns the value of a counter or gauge, or the sample count of a
// histogram; -1 if the series does not exist.
func (g gathered) value(name, labels string) float64 {
	m, ok := g[name][labels]
	switch {
	case !ok:
		return -1
	case m.GetCounter() != nil:
		return m.GetCounter().GetValue()
	case m.GetGauge() != nil:
		return m.GetGauge().GetValue()
	case m.GetHistogram() != nil:
		return float64(m.GetHistogram().GetSampleCount())
	}
	return -1
}

func TestMetricsFromRealLedger(t *testing.T) {
	ctx := context.Background()
	l, err := idem.OpenLedger(filepath.Join(t.TempDir(), "ledger.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	reg := prometheus.NewRegistry()
	m, err := prom.New(reg, prom.WithLister(l))
	if err != nil {
		t.Fatal(err)
	}
	noWait := idem.WithBackoff(idem.MaxAttempts(3, idem.Constant(0)))
	boom := errors.New("boom")

	// settle: runs, then is already done.
	for range 2 {
		if err := l.Run(ctx, idem.Key{Job: "settle", Period: "2026-10-27"}, func(context.Context) error { return nil }, m.Option()); err != nil {
			t.Fatal(err)
		}
	}
	// flaky: fails once, then succeeds within the same Run: one retry.
	calls := 0
	err = l.Run(ctx, idem.Key{Job: "flaky", Period: "2026-10-27"}, func(context.Context) error {
		calls++
		if calls == 1 {
			return boom
		}
		return nil
	}, noWait, m.Option())
	if err != nil {
		t.Fatal(err)
	}
	// broken: fails every time, gives up after 3 attempts and parks; a
	// second Run finds it parked.
	for range 2 {
		err = l.Run(ctx, idem.Key{Job: "broken", Period: "2026-10-27"}, func(context.Context) error { return boom }, noWait, m.Option())
		if !errors.Is(err, idem.ErrParked) {
			t.Fatalf("broken: got %v, want ErrParked", err)
		}
	}
	// pay: at-most-once and fails: the outcome is unknown.
	err = l.Run(ctx, idem.Key{Job: "pay", Period: "2026-10-27"}, func(context.Context) error { return boom }, idem.AtMostOnce(), m.Option())
	if !errors.Is(err, idem.ErrUnknownOutcome) {
		t.Fatalf("pay: got %v, want ErrUnknownOutcome", err)
	}

	g := gather(t, reg)
	g.expect(t, []series{
		{"idem_runs_total", "job=settle,outcome=ran", 1},
		{"idem_runs_total", "job=settle,outcome=already_done", 1},
		{"idem_runs_total", "job=flaky,outcome=ran", 1},
		{"idem_runs_total", "job=broken,outcome=parked", 2},
		{"idem_runs_total", "job=pay,outcome=unknown", 1},
		{"idem_run_duration_seconds", "job=settle", 2},
		{"idem_run_duration_seconds", "job=broken", 2},
		{"idem_retries_total", "job=settle", 0},
		{"idem_retries_total", "job=flaky", 1},
		{"idem_retries_total", "job=broken", 2}, // 3 attempts in the first Run, none in the second
		{"idem_errors_total", "job=settle", 0},
		{"idem_errors_total", "job=flaky", 0},
		{"idem_errors_total", "job=broken", 2},
		{"idem_errors_total", "job=pay", 1},
		{"idem_keys", "job=broken,status=parked", 1},
		{"idem_keys", "job=broken,status=pending", 0},
		{"idem_keys", "job=pay,status=unknown", 1},
		{"idem_keys", "job=settle,status=parked", 0},
		{"idem_keys", "job=settle,status=pending", 0},
		{"idem_ledger_up", "", 1},
	})

	// An operator un-parks broken and resolves pay: the gauges follow the
	// ledger at the next scrape, without any Run.
	if err := l.Reset(ctx, idem.Key{Job: "broken", Period: "2026-10-27"}); err != nil {
		t.Fatal(err)
	}
	if err := l.Resolve(ctx, idem.Key{Job: "pay", Period: "2026-10-27"}, idem.ResolveDone); err != nil {
		t.Fatal(err)
	}
	g = gather(t, reg)
	for _, c := range []struct {
		labels string
		want   float64
	}{
		{"job=broken,status=parked", 0},
		{"job=broken,status=pending", 1}, // reset: failed, runnable now
		{"job=pay,status=unknown", 0},
	} {
		if got := g.value("idem_keys", c.labels); got != c.want {
			t.Errorf("after reset/resolve: idem_keys{%s} = %v, want %v", c.labels, got, c.want)
		}
	}
}

// A ledger that cannot be read does not fail the scrape: idem_ledger_up
// drops to 0 and the run metrics are still served.
func TestLedgerDownKeepsScrapeWorking(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := prom.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	m.Observe(idem.Result{Key: idem.Key{Job: "j", Period: "p"}, Outcome: idem.Ran, Attempts: 1})
	if g := gather(t, reg); g.value("idem_ledger_up", "") != -1 || g["idem_keys"] != nil {
		t.Errorf("without a lister: got idem_ledger_up or idem_keys: %v", g)
	}
	m.Watch(failingLister{})
	g := gather(t, reg)
	if got := g.value("idem_ledger_up", ""); got != 0 {
		t.Errorf("idem_ledger_up = %v, want 0", got)
	}
	if got := g.value("idem_runs_total", "job=j,outcome=ran"); got != 1 {
		t.Errorf("idem_runs_total = %v, want 1", got)
	}
}

type failingLister struct{}

func (failingLister) List(context.Context, idem.Filter) ([]idem.Record, error) {
	return nil, errors.New("disk on fire")
}

func TestNewRefusesDoubleRegistration(t *testing.T) {
	reg := prometheus.NewRegistry()
	if _, err := prom.New(reg); err != nil {
		t.Fatal(err)
	}
	if _, err := prom.New(reg); err == nil {
		t.Fatal("second New on the same registry: no error")
	}
}

// TestFanOutCountedOncePerCall: an Each is one observation of its period
// (with its outcome, also when items are unknown), and its items are
// counted by final status when the call completes the period; a later
// Each of the done period adds an already_done and no items.
func TestFanOutCountedOncePerCall(t *testing.T) {
	ctx := context.Background()
	l, err := idem.OpenLedger(filepath.Join(t.TempDir(), "ledger.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	reg := prometheus.NewRegistry()
	m, err := prom.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	abcd := idem.Items(func(yield func(string) bool) { _ = yield("a") && yield("b") && yield("c") && yield("d") })
	grant := idem.Key{Job: "grant", Period: "2026-10-27"}
	for range 2 {
		_, err := idem.Each(ctx, l, grant, abcd, func(_ context.Context, it string) error {
			if it == "d" {
				return idem.Permanent(errors.New("account frozen"))
			}
			return nil
		}, m.Option())
		if err != nil {
			t.Fatal(err)
		}
	}
	// pay: at most once, an item fails: unknown, the period stays open.
	_, err = idem.Each(ctx, l, idem.Key{Job: "pay", Period: "2026-10-27"}, abcd, func(_ context.Context, it string) error {
		if it == "b" {
			return errors.New("gateway timeout")
		}
		return nil
	}, idem.AtMostOnce(), m.Option())
	if !errors.Is(err, idem.ErrUnknownOutcome) {
		t.Fatalf("pay: %v, want ErrUnknownOutcome", err)
	}
	g := gather(t, reg)
	g.expect(t, []series{
		{"idem_runs_total", "job=grant,outcome=ran", 1},
		{"idem_runs_total", "job=grant,outcome=already_done", 1},
		{"idem_run_duration_seconds", "job=grant", 2},
		{"idem_items_total", "job=grant,status=done", 3},
		{"idem_items_total", "job=grant,status=parked", 1},
		{"idem_errors_total", "job=grant", 0},
		{"idem_runs_total", "job=pay,outcome=unknown", 1},
		{"idem_errors_total", "job=pay", 1},
		{"idem_items_total", "job=pay,status=done", -1}, // not completed: no items counted
	})
}

func TestDeferralsCounted(t *testing.T) {
	ctx := context.Background()
	l, err := idem.OpenLedger(filepath.Join(t.TempDir(), "ledger.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	reg := prometheus.NewRegistry()
	m, err := prom.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	busy := guard.Func("partner", func(context.Context) error { return errors.New("in maintenance") })
	key := idem.Key{Job: "settle", Period: "2026-10-27"}
	for range 2 {
		if err := l.Run(ctx, key, func(context.Context) error { return nil }, idem.WithGuard(busy), m.Option()); !errors.Is(err, idem.ErrDeferred) {
			t.Fatalf("Run: %v, want ErrDeferred", err)
		}
	}
	// A breaker open after one failure defers the next Each.
	br := idem.NewBreaker(1, time.Hour)
	items := idem.Items(func(yield func(string) bool) { _ = yield("a") && yield("b") })
	grant := idem.Key{Job: "grant", Period: "2026-10-27"}
	fail := func(context.Context, string) error { return errors.New("503") }
	for range 2 {
		if _, err := idem.Each(ctx, l, grant, items, fail, idem.WithBreaker(br), idem.WithWorkers(1), m.Option()); !errors.Is(err, idem.ErrDeferred) {
			t.Fatalf("Each: %v, want ErrDeferred", err)
		}
	}
	// A shared limit whose only place another holds defers a Run whose
	// context ends while it waits: counted with the limit as its reason.
	once, err := limit.NewAtOnce(l, "db", 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	slot, err := once.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer slot.Release()
	for range 2 {
		wctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		err := l.Run(wctx, idem.Key{Job: "report", Period: "2026-10-27"}, func(context.Context) error { return nil }, idem.WithLimits(once), m.Option())
		cancel()
		if !errors.Is(err, idem.ErrDeferred) {
			t.Fatalf("Run waiting for a limit: %v, want ErrDeferred", err)
		}
	}
	g := gather(t, reg)
	g.expect(t, []series{
		{"idem_deferrals_total", "job=report,reason=limit db", 2},
		{"idem_runs_total", "job=report,outcome=deferred", 2},
		{"idem_deferrals_total", "job=settle,reason=partner", 2},
		{"idem_runs_total", "job=settle,outcome=deferred", 2},
		{"idem_deferrals_total", "job=grant,reason=breaker", 2},
		{"idem_runs_total", "job=grant,outcome=deferred", 2},
	})
}

// TestSchedulerGauges: idem_last_success_timestamp_seconds and
// idem_next_due_timestamp_seconds follow a Scheduler's jobs.
func TestSchedulerGauges(t *testing.T) {
	l, err := idem.OpenLedger(filepath.Join(t.TempDir(), "ledger.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	start := time.Date(2026, 3, 1, 10, 30, 0, 0, time.UTC)
	clk := schedtest.NewClock(start)
	s := idem.NewScheduler(l, idem.WithClock(clk))
	ok := func(context.Context, idem.Period) error { return nil }
	if err := s.Add("hourly", idem.Hourly(time.UTC), ok); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	m, err := prom.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	m.WatchScheduler(s)
	if got := gather(t, reg).value("idem_last_success_timestamp_seconds", "job=hourly"); got != 0 {
		t.Errorf("last success before Run: %v, want 0", got)
	}
	done := make(chan error, 1)
	go func() { done <- s.Run(context.Background()) }()
	defer func() {
		_ = s.Shutdown(context.Background())
		<-done
	}()
	schedtest.Idle(t, s, clk.Now())
	g := gather(t, reg)
	if got, want := g.value("idem_last_success_timestamp_seconds", "job=hourly"), float64(start.Unix()); got != want {
		t.Errorf("last success: %v, want %v", got, want)
	}
	if got, want := g.value("idem_next_due_timestamp_seconds", "job=hourly"), float64(start.Add(30*time.Minute).Unix()); got != want {
		t.Errorf("next due: %v, want %v", got, want)
	}
}

// TestSchedulerMetricsReachEach: the metrics given once to a Scheduler
// count the items of the Each calls its jobs make, with no option passed
// to Each again.
func TestSchedulerMetricsReachEach(t *testing.T) {
	l, err := idem.OpenLedger(filepath.Join(t.TempDir(), "ledger.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	reg := prometheus.NewRegistry()
	m, err := prom.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	clk := schedtest.NewClock(time.Date(2026, 3, 1, 10, 30, 0, 0, time.UTC))
	s := idem.NewScheduler(l, idem.WithClock(clk), m.Option())
	abcd := idem.Items(func(yield func(string) bool) { _ = yield("a") && yield("b") && yield("c") && yield("d") })
	if err := s.Add("grant", idem.Hourly(time.UTC), func(ctx context.Context, p idem.Period) error {
		_, err := idem.Each(ctx, l, idem.Key{Job: "grant_items", Period: p.Name}, abcd, func(context.Context, string) error { return nil })
		return err
	}); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Run(context.Background()) }()
	defer func() {
		_ = s.Shutdown(context.Background())
		<-done
	}()
	schedtest.Idle(t, s, clk.Now())
	gather(t, reg).expect(t, []series{
		{"idem_runs_total", "job=grant,outcome=ran", 1},
		{"idem_runs_total", "job=grant_items,outcome=ran", 1},
		{"idem_items_total", "job=grant_items,status=done", 4},
	})
}

// TestWaitingCounted: a catch-up period that waits for another job's
// (idem.After) is counted as idem_runs_total{outcome="waiting"}, once
// per look, with no failure; once its upstream is done it counts as ran.
func TestWaitingCounted(t *testing.T) {
	ctx := context.Background()
	clk := idemtest.NewClock(time.Date(2026, 10, 28, 2, 0, 0, 0, time.UTC))
	l, err := idem.OpenLedger(filepath.Join(t.TempDir(), "ledger.db"), idem.WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	reg := prometheus.NewRegistry()
	m, err := prom.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	daily := idem.Daily(time.UTC)
	noop := func(context.Context, idem.Period) error { return nil }
	after := idem.After("settle", idem.SamePeriod())
	for range 3 {
		if _, err := idem.CatchUp(ctx, l, "mail", daily, noop, after, m.Option()); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := idem.CatchUp(ctx, l, "settle", daily, noop, m.Option()); err != nil {
		t.Fatal(err)
	}
	if _, err := idem.CatchUp(ctx, l, "mail", daily, noop, after, m.Option()); err != nil {
		t.Fatal(err)
	}
	gather(t, reg).expect(t, []series{
		{"idem_runs_total", "job=mail,outcome=waiting", 3},
		{"idem_runs_total", "job=mail,outcome=ran", 1},
		{"idem_runs_total", "job=settle,outcome=ran", 1},
	})
}

// TestErrorsCountNoBusyOrDeferred: idem_errors_total counts failures only,
// as the OpenTelemetry spans' status does (idem.Outcome.NotNow): a Run that
// finds another holder running its period (in_progress, as a second
// replica sees every day) or that a guard defers is no error; a fn that
// fails is.
func TestErrorsCountNoBusyOrDeferred(t *testing.T) {
	ctx := context.Background()
	l, err := idem.OpenLedger(filepath.Join(t.TempDir(), "ledger.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	reg := prometheus.NewRegistry()
	m, err := prom.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	key := idem.Key{Job: "settle", Period: "2026-10-27"}
	started, release := make(chan struct{}), make(chan struct{})
	held := make(chan error, 1)
	go func() {
		held <- l.Run(ctx, key, func(context.Context) error {
			close(started)
			<-release
			return nil
		}, m.Option())
	}()
	testwait.Recv(t, started, "the first Run's fn to start")
	for range 3 {
		if err := l.Run(ctx, key, func(context.Context) error { return nil }, m.Option()); !errors.Is(err, idem.ErrInProgress) {
			t.Fatalf("Run beside the holder: %v, want ErrInProgress", err)
		}
	}
	close(release)
	if err := testwait.Recv(t, held, "the first Run to return"); err != nil {
		t.Fatal(err)
	}
	refuse := guard.Func("partner", func(context.Context) error { return errors.New("in maintenance") })
	if err := l.Run(ctx, idem.Key{Job: "settle", Period: "2026-10-28"}, func(context.Context) error { return nil }, idem.WithGuard(refuse), m.Option()); !errors.Is(err, idem.ErrDeferred) {
		t.Fatalf("guarded Run: %v, want ErrDeferred", err)
	}
	fail := idem.WithBackoff(idem.MaxAttempts(1, idem.Constant(0)))
	if err := l.Run(ctx, idem.Key{Job: "report", Period: "2026-10-27"}, func(context.Context) error { return errors.New("boom") }, fail, m.Option()); err == nil {
		t.Fatal("a failing fn's Run returned nil")
	}
	gather(t, reg).expect(t, []series{
		{"idem_runs_total", "job=settle,outcome=in_progress", 3},
		{"idem_runs_total", "job=settle,outcome=ran", 1},
		{"idem_runs_total", "job=settle,outcome=deferred", 1},
		{"idem_errors_total", "job=settle", 0},
		{"idem_errors_total", "job=report", 1},
	})
}

// TestRerunsCounted: idem_reruns_total counts, by job, the periods a
// re-run request queued a re-run for (done, and running: after its
// attempt), not those the same request sent again had queued before, and
// nothing for a refused request.
func TestRerunsCounted(t *testing.T) {
	ctx := context.Background()
	l, err := idem.OpenLedger(filepath.Join(t.TempDir(), "ledger.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	reg := prometheus.NewRegistry()
	m, err := prom.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	noop := func(context.Context) error { return nil }
	k1, k2 := idem.Key{Job: "settle", Period: "2026-10-01"}, idem.Key{Job: "settle", Period: "2026-10-02"}
	report := idem.Key{Job: "report", Period: "2026-10-01"}
	for _, k := range []idem.Key{k1, k2, report} {
		if err := l.Run(ctx, k, noop); err != nil {
			t.Fatal(err)
		}
	}
	rerun := func(id string, keys ...idem.Key) {
		t.Helper()
		out, err := idem.Rerun(ctx, l, idem.RerunRequest{Keys: keys, RequestID: id, Reason: "flow table corrected", By: "ops"})
		if err != nil && !errors.Is(err, idem.ErrNotRerunnable) {
			t.Fatal(err)
		}
		m.ObserveRerun(out)
	}
	rerun("a", k1, k2)
	rerun("a", k1, k2)                                                // a retrying script: seen before
	rerun("b", report, idem.Key{Job: "report", Period: "2026-10-09"}) // refused: the second never ran
	rerun("c", report)
	gather(t, reg).expect(t, []series{
		{"idem_reruns_total", "job=settle", 2},
		{"idem_reruns_total", "job=report", 1},
	})
}
