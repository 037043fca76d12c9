package main

import (
	"context"
	"fmt"
	"time"

	idemotel "github.com/idemgo/idem/otel"
	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
)

// otelOverhead: what tracing costs a Ledger.Run (module otel, package
// idemotel): fresh Runs of new keys and duplicate Runs of done keys,
// without the adapter, with it over OpenTelemetry's no-op tracer
// provider, and with it over the SDK with a batching span processor (its
// exporter discards the batches). The three variants take turns each
// round, on one ledger, each with keys of its own; the line gives their
// throughputs and the cost per Run of each adapter, in microseconds.
// Metrics (Telemetry.Option) are not measured: spans only.
func otelOverhead(ctx context.Context, cfg config) (result, error) {
	_, l, cleanup, err := ledgerInTempDir(ctx, "otel")
	if err != nil {
		return result{}, err
	}
	defer cleanup()
	sdk := sdktrace.NewTracerProvider(sdktrace.WithBatcher(tracetest.NewNoopExporter()))
	defer sdk.Shutdown(context.Background())
	var mp metric.MeterProvider = metricnoop.NewMeterProvider()
	variants := []struct {
		name string
		tp   trace.TracerProvider // nil: no adapter
	}{{"without", nil}, {"noop", tracenoop.NewTracerProvider()}, {"sdk_batch", sdk}}
	ctxs := make([]context.Context, len(variants))
	for i, v := range variants {
		ctxs[i] = ctx
		if v.tp != nil {
			tel, err := idemotel.New(v.tp, mp)
			if err != nil {
				return result{}, err
			}
			ctxs[i] = tel.Context(ctx)
		}
	}
	type tally struct {
		n int
		d time.Duration
	}
	fresh, dup := make([]tally, len(variants)), make([]tally, len(variants))
	for round := 0; round <= cfg.rounds; round++ {
		for j := range variants {
			i := (j + round) % len(variants) // who goes first turns
			keys := roundKeys(fmt.Sprintf("otel%d", i), round, cfg.n)
			start := time.Now()
			for _, k := range keys {
				if err := l.Run(ctxs[i], k, noop); err != nil {
					return result{}, err
				}
			}
			mid := time.Now()
			for _, k := range keys {
				if err := l.Run(ctxs[i], k, noop); err != nil {
					return result{}, err
				}
			}
			end := time.Now()
			if round == 0 {
				continue // warm-up
			}
			fresh[i].n, fresh[i].d = fresh[i].n+len(keys), fresh[i].d+mid.Sub(start)
			dup[i].n, dup[i].d = dup[i].n+len(keys), dup[i].d+end.Sub(mid)
		}
	}
	perRun := func(t tally) float64 { return t.d.Seconds() * 1e6 / float64(t.n) }
	text := ""
	for _, part := range []struct {
		what string
		ts   []tally
	}{{"fresh", fresh}, {"duplicate", dup}} {
		if text != "" {
			text += "; "
		}
		text += fmt.Sprintf("%s Run/s without=%s noop=%s sdk_batch=%s (cost per Run: noop %+.1fµs, sdk_batch %+.1fµs)", part.what,
			rate(perSecond(part.ts[0].n, part.ts[0].d)), rate(perSecond(part.ts[1].n, part.ts[1].d)), rate(perSecond(part.ts[2].n, part.ts[2].d)),
			perRun(part.ts[1])-perRun(part.ts[0]), perRun(part.ts[2])-perRun(part.ts[0]))
	}
	return result{text: text}, nil
}
