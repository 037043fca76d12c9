package idemotel_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/guard"
	"github.com/idemgo/idem/idemtest"
	"github.com/idemgo/idem/internal/testwait"
	idemotel "github.com/idemgo/idem/otel"
	"github.com/idemgo/idem/outbox"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.opentelemetry.io/otel/trace/noop"
)

// sums reads the reader's metric name: the value of each data point, by
// its attributes (a histogram's: its count).
func sums(t testing.TB, rd *sdkmetric.ManualReader, name string) map[string]float64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := rd.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != name {
				continue
			}
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					out[attrString(p.Attributes)] = float64(p.Value)
				}
			case metricdata.Gauge[int64]:
				for _, p := range d.DataPoints {
					out[attrString(p.Attributes)] = float64(p.Value)
				}
			case metricdata.Gauge[float64]:
				for _, p := range d.DataPoints {
					out[attrString(p.Attributes)] = p.Value
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					out[attrString(p.Attributes)] = float64(p.Count)
				}
			default:
				t.Fatalf("%s: data %T", name, m.Data)
			}
		}
	}
	return out
}

func attrString(s attribute.Set) string {
	var parts []string
	for _, kv := range s.ToSlice() {
		parts = append(parts, string(kv.Key)+"="+kv.Value.String())
	}
	return strings.Join(parts, ",")
}

func wantSum(t testing.TB, got map[string]float64, attrs string, want float64) {
	t.Helper()
	if got[attrs] != want {
		t.Errorf("{%s} = %v, want %v (all: %v)", attrs, got[attrs], want, got)
	}
}

// TestMetrics: the instruments count what package prom's metrics count:
// calls by outcome (a duplicate as already_done), their durations,
// retries, errors, deferrals by reason, a fan-out's items by status, and
// the relay's deliveries by topic and outcome.
func TestMetrics(t *testing.T) {
	rd := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(rd))
	tel, err := idemotel.New(noop.NewTracerProvider(), mp)
	if err != nil {
		t.Fatal(err)
	}
	l := openLedger(t)
	ctx := tel.Context(context.Background())
	key := idem.Key{Job: "settle", Period: "p1"}
	calls := 0
	flaky := func(context.Context) error {
		if calls++; calls == 1 {
			return errors.New("boom")
		}
		return nil
	}
	for range 2 {
		if err := l.Run(ctx, key, flaky, tel.Option(), idem.WithBackoff(idem.Constant(idem.MinLease))); err != nil {
			t.Fatal(err)
		}
	}
	refuse := guard.Func("disk", func(context.Context) error { return errors.New("full") })
	if err := l.Run(ctx, idem.Key{Job: "settle", Period: "p2"}, flaky, tel.Option(), idem.WithGuard(refuse)); !errors.Is(err, idem.ErrDeferred) {
		t.Fatalf("guarded Run: %v", err)
	}
	// Another holder running the period is no error either (as for the
	// span's status: idem.Outcome.NotNow); a failed fn is.
	held := idem.Key{Job: "settle", Period: "p3"}
	if err := l.Run(ctx, held, func(context.Context) error {
		if err := l.Run(context.Background(), held, flaky, tel.Option()); !errors.Is(err, idem.ErrInProgress) {
			t.Errorf("Run beside the holder: %v, want ErrInProgress", err)
		}
		return nil
	}, tel.Option()); err != nil {
		t.Fatal(err)
	}
	if err := l.Run(ctx, idem.Key{Job: "report", Period: "p1"}, func(context.Context) error { return errors.New("boom") },
		tel.Option(), idem.WithBackoff(idem.MaxAttempts(1, idem.Constant(0)))); err == nil {
		t.Fatal("a failing fn's Run returned nil")
	}
	var ids []string
	for i := range 5 {
		ids = append(ids, fmt.Sprint("a", i))
	}
	if _, err := idem.Each(ctx, l, idem.Key{Job: "grant", Period: "p1"}, idem.Items(slices.Values(ids)),
		func(context.Context, string) error { return nil }, tel.Option()); err != nil {
		t.Fatal(err)
	}
	if err := l.RunTx(ctx, idem.Key{Job: "notify", Period: "p1"}, func(ctx context.Context, tx *sql.Tx) error {
		_, err := outbox.Put(ctx, tx, outbox.Message{Topic: "orders"})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	rc := newReceiver(t, nil)
	if _, err := outbox.RelayOnce(ctx, l, outbox.Webhook(rc.URL, nil), tel.RelayOption()); err != nil {
		t.Fatal(err)
	}

	runs := sums(t, rd, "idem.runs")
	wantSum(t, runs, "idem.job=settle,idem.outcome=ran", 2)
	wantSum(t, runs, "idem.job=settle,idem.outcome=already_done", 1)
	wantSum(t, runs, "idem.job=settle,idem.outcome=deferred", 1)
	wantSum(t, runs, "idem.job=settle,idem.outcome=in_progress", 1)
	wantSum(t, runs, "idem.job=grant,idem.outcome=ran", 1) // the fan-out: one call, its done mark not counted apart
	wantSum(t, sums(t, rd, "idem.run.duration"), "idem.job=settle", 5)
	wantSum(t, sums(t, rd, "idem.retries"), "idem.job=settle", 1)
	wantSum(t, sums(t, rd, "idem.errors"), "idem.job=settle", 0) // deferred and in_progress: not now, not failed
	wantSum(t, sums(t, rd, "idem.errors"), "idem.job=report", 1)
	wantSum(t, sums(t, rd, "idem.deferrals"), "idem.job=settle,idem.reason=disk", 1)
	items := sums(t, rd, "idem.items")
	wantSum(t, items, "idem.job=grant,idem.status=done", 5)
	wantSum(t, items, "idem.job=grant,idem.status=parked", 0)
	wantSum(t, sums(t, rd, "idem.outbox.deliveries"), "idem.outcome=delivered,messaging.destination.name=orders", 1)
}

// TestInstrumentNamesArePromsNames: each instrument's name translates, by
// the OpenTelemetry-to-Prometheus rules (dots to underscores, unit s to
// _seconds, _total for a counter), to the name of package prom's metric of
// the same meaning, which package prom's source declares.
func TestInstrumentNamesArePromsNames(t *testing.T) {
	var src []byte
	for _, f := range []string{"../prom/prom.go", "../prom/outbox.go"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		src = append(src, b...)
	}
	for _, in := range idemotel.Instruments {
		name := strings.ReplaceAll(in.Name, ".", "_")
		if in.Unit == "s" {
			name += "_seconds"
		}
		switch in.Kind {
		case "counter":
			name += "_total"
		case "gauge", "histogram":
		default:
			t.Errorf("%s: kind %q", in.Name, in.Kind)
		}
		if name != in.Prometheus {
			t.Errorf("%s translates to %s, but its table names %s", in.Name, name, in.Prometheus)
		}
		if !strings.Contains(string(src), `"`+in.Prometheus+`"`) {
			t.Errorf("package prom declares no metric %s", in.Prometheus)
		}
	}
}

// TestGauges: idem.keys counts the watched ledger's unsettled keys by
// status (and idem.ledger.up says the read worked), the outbox gauges its
// messages by topic, and the Scheduler gauges a watched Scheduler's jobs.
func TestGauges(t *testing.T) {
	rd := sdkmetric.NewManualReader()
	tel, err := idemotel.New(noop.NewTracerProvider(), sdkmetric.NewMeterProvider(sdkmetric.WithReader(rd)))
	if err != nil {
		t.Fatal(err)
	}
	l := openLedger(t)
	ctx := context.Background()
	m := tel.Metrics()
	m.Watch(l)
	m.WatchOutbox(l)
	boom := errors.New("boom")
	// One key backing off, one parked, one done.
	if err := l.Run(ctx, idem.Key{Job: "settle", Period: "p1"}, func(context.Context) error { return boom },
		idem.WithBackoff(idem.Constant(time.Hour))); !errors.Is(err, idem.ErrBackingOff) {
		t.Fatalf("Run: %v", err)
	}
	if err := l.Run(ctx, idem.Key{Job: "settle", Period: "p2"}, func(context.Context) error { return idem.Permanent(boom) }); !errors.Is(err, idem.ErrParked) {
		t.Fatalf("Run: %v", err)
	}
	if err := l.RunTx(ctx, idem.Key{Job: "notify", Period: "p1"}, func(ctx context.Context, tx *sql.Tx) error {
		_, err := outbox.Put(ctx, tx, outbox.Message{Topic: "orders"})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	keys := sums(t, rd, "idem.keys")
	wantSum(t, keys, "idem.job=settle,idem.status=pending", 1)
	wantSum(t, keys, "idem.job=settle,idem.status=parked", 1)
	wantSum(t, keys, "idem.job=settle,idem.status=unknown", 0)
	wantSum(t, sums(t, rd, "idem.ledger.up"), "", 1)
	msgs := sums(t, rd, "idem.outbox.messages")
	wantSum(t, msgs, "idem.status=pending,messaging.destination.name=orders", 1)
	wantSum(t, msgs, "idem.status=delivered,messaging.destination.name=orders", 0)
	wantSum(t, sums(t, rd, "idem.outbox.up"), "", 1)
	if age, ok := sums(t, rd, "idem.outbox.oldest_pending_age")["messaging.destination.name=orders"]; !ok || age < 0 {
		t.Fatalf("oldest pending age: %v, %v", age, ok)
	}

	// A Scheduler on a clock that stands still: its job runs its due
	// period at once, and then the next is due an hour later.
	now := time.Date(2026, 12, 1, 10, 30, 0, 0, time.UTC)
	s := idem.NewScheduler(l, idem.WithClock(idemtest.NewClock(now)))
	if err := s.Add("hourly", idem.Hourly(time.UTC), func(context.Context, idem.Period) error { return nil }); err != nil {
		t.Fatal(err)
	}
	m.WatchScheduler(s)
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- s.Run(sctx) }()
	testwait.Until(t, func() bool { return !s.Status().Jobs[0].LastSuccess.IsZero() }, "the hourly job's first success")
	wantSum(t, sums(t, rd, "idem.last_success.timestamp"), "idem.job=hourly", float64(now.Unix()))
	wantSum(t, sums(t, rd, "idem.next_due.timestamp"), "idem.job=hourly", float64(now.Truncate(time.Hour).Add(time.Hour).Unix()))
	cancel()
	testwait.Recv(t, done, "Scheduler.Run to return")
}

// TestMetricsManyJobs: Observe keeps the attribute sets of a bounded
// number of jobs (4096); the calls of jobs beyond them are counted all the
// same, and every job's idem.retries and idem.errors series exist from its
// first call on, at 0, also when its later calls add nothing to them.
func TestMetricsManyJobs(t *testing.T) {
	rd := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(rd), sdkmetric.WithCardinalityLimit(10000))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	m, err := idemotel.NewMetrics(mp)
	if err != nil {
		t.Fatal(err)
	}
	const jobs = 4100
	for i := range jobs {
		for range 2 {
			m.Observe(idem.Result{Key: idem.Key{Job: fmt.Sprintf("job%04d", i), Period: "p"}, Outcome: idem.AlreadyDone})
		}
	}
	m.Observe(idem.Result{Key: idem.Key{Job: "job0000", Period: "p"}, Outcome: idem.Ran, Attempts: 3})
	m.Observe(idem.Result{Key: idem.Key{Job: "job4099", Period: "p"}, Outcome: idem.Failed, Attempts: 2, Err: errors.New("boom")})
	runs, retries, errs := sums(t, rd, "idem.runs"), sums(t, rd, "idem.retries"), sums(t, rd, "idem.errors")
	for _, job := range []string{"job0000", "job4095", "job4096", "job4099"} {
		wantSum(t, runs, "idem.job="+job+",idem.outcome=already_done", 2)
	}
	if len(retries) != jobs || len(errs) != jobs {
		t.Fatalf("%d idem.retries series, %d idem.errors series, want %d each", len(retries), len(errs), jobs)
	}
	wantSum(t, retries, "idem.job=job0000", 2)
	wantSum(t, errs, "idem.job=job0000", 0)
	wantSum(t, retries, "idem.job=job4099", 1)
	wantSum(t, errs, "idem.job=job4099", 1)
	wantSum(t, retries, "idem.job=job4098", 0)
}

// TestRerunsMetric: idem.reruns counts, by job, the periods a re-run
// request queued a re-run for, not those the same request sent again had
// queued before.
func TestRerunsMetric(t *testing.T) {
	rd := sdkmetric.NewManualReader()
	tel, err := idemotel.New(noop.NewTracerProvider(), sdkmetric.NewMeterProvider(sdkmetric.WithReader(rd)))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	l := openLedger(t)
	keys := []idem.Key{{Job: "settle", Period: "2026-10-01"}, {Job: "settle", Period: "2026-10-02"}}
	for _, k := range keys {
		if err := l.Run(ctx, k, func(context.Context) error { return nil }); err != nil {
			t.Fatal(err)
		}
	}
	for range 2 { // the second: a retrying script, seen before
		out, err := idem.Rerun(ctx, l, idem.RerunRequest{Keys: keys, RequestID: "a", Reason: "flow table corrected", By: "ops"})
		if err != nil {
			t.Fatal(err)
		}
		tel.ObserveRerun(out)
	}
	wantSum(t, sums(t, rd, "idem.reruns"), "idem.job=settle", 2)
}
