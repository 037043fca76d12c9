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
// provider, with it over the SDK with a batching span processor (its
// exporter discards the batches), and the same with
// idemotel.WithDuplicateSpans (a span for a duplicate too). The variants
// take turns each round, on one ledger, each with keys of its own; the
// line gives their throughputs and each adapter's as a ratio of the
// throughput without it (below 1 by its cost), then the cost per Run in
// microseconds. Metrics (Telemetry.Option) are not measured: spans only.
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
		opts []idemotel.Option
	}{{"without", nil, nil}, {"noop", tracenoop.NewTracerProvider(), nil}, {"sdk_batch", sdk, nil},
		{"sdk_batch_dupspans", sdk, []idemotel.Option{idemotel.WithDuplicateSpans()}}}
	ctxs := make([]context.Context, len(variants))
	for i, v := range variants {
		ctxs[i] = ctx
		if v.tp != nil {
			tel, err := idemotel.New(v.tp, mp, v.opts...)
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
		text += part.what + " Run/s"
		for i, v := range variants {
			text += fmt.Sprintf(" %s=%s", v.name, rate(perSecond(part.ts[i].n, part.ts[i].d)))
		}
		text += " (ratio to without:"
		for i, v := range variants[1:] {
			text += fmt.Sprintf(" %s %.2f", v.name, perRun(part.ts[0])/perRun(part.ts[i+1]))
		}
		text += "; cost per Run:"
		for i, v := range variants[1:] {
			text += fmt.Sprintf(" %s %+.1fµs", v.name, perRun(part.ts[i+1])-perRun(part.ts[0]))
		}
		text += ")"
	}
	return result{text: text}, nil
}
