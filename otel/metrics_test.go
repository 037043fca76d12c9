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

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/fanout"
	"github.com/idemgo/idem/guard"
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
	var ids []string
	for i := range 5 {
		ids = append(ids, fmt.Sprint("a", i))
	}
	if _, err := fanout.Each(ctx, l, idem.Key{Job: "grant", Period: "p1"}, fanout.Items(slices.Values(ids)),
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
	wantSum(t, runs, "idem.job=settle,idem.outcome=ran", 1)
	wantSum(t, runs, "idem.job=settle,idem.outcome=already_done", 1)
	wantSum(t, runs, "idem.job=settle,idem.outcome=deferred", 1)
	wantSum(t, runs, "idem.job=grant,idem.outcome=ran", 1) // the fan-out: one call, its done mark not counted apart
	wantSum(t, sums(t, rd, "idem.run.duration"), "idem.job=settle", 3)
	wantSum(t, sums(t, rd, "idem.retries"), "idem.job=settle", 1)
	wantSum(t, sums(t, rd, "idem.errors"), "idem.job=settle", 1)
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
		if in.Kind == "counter" {
			name += "_total"
		}
		if name != in.Prometheus {
			t.Errorf("%s translates to %s, but its table names %s", in.Name, name, in.Prometheus)
		}
		if !strings.Contains(string(src), `"`+in.Prometheus+`"`) {
			t.Errorf("package prom declares no metric %s", in.Prometheus)
		}
	}
}
