package idemotel_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/idemgo/idem"
	idemotel "github.com/idemgo/idem/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// BenchmarkDuplicateRun: a Run of a key that is done (the cheapest call,
// where tracing weighs most), without the adapter, with it over the no-op
// provider, and over the SDK with a batching processor.
func BenchmarkDuplicateRun(b *testing.B) {
	sdk := sdktrace.NewTracerProvider(sdktrace.WithBatcher(tracetest.NewNoopExporter()))
	b.Cleanup(func() { _ = sdk.Shutdown(context.Background()) })
	for _, v := range []struct {
		name string
		tp   trace.TracerProvider
	}{{"without", nil}, {"noop", noop.NewTracerProvider()}, {"sdk_batch", sdk}} {
		b.Run(v.name, func(b *testing.B) {
			l := openLedger(b)
			ctx := context.Background()
			if v.tp != nil {
				tel, err := idemotel.New(v.tp, noopMeter())
				if err != nil {
					b.Fatal(err)
				}
				ctx = tel.Context(ctx)
			}
			key := idem.Key{Job: "dup", Period: "p1"}
			fn := func(context.Context) error { return nil }
			if err := l.Run(ctx, key, fn); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				if err := l.Run(ctx, key, fn); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkFreshRun: a Run of a new key (a claim, fn, a done mark),
// without the adapter, with it over the no-op provider, and over the SDK
// with a batching processor.
func BenchmarkFreshRun(b *testing.B) {
	sdk := sdktrace.NewTracerProvider(sdktrace.WithBatcher(tracetest.NewNoopExporter()))
	b.Cleanup(func() { _ = sdk.Shutdown(context.Background()) })
	for _, v := range []struct {
		name string
		tp   trace.TracerProvider
	}{{"without", nil}, {"noop", noop.NewTracerProvider()}, {"sdk_batch", sdk}} {
		b.Run(v.name, func(b *testing.B) {
			l := openLedger(b)
			ctx := context.Background()
			if v.tp != nil {
				tel, err := idemotel.New(v.tp, noopMeter())
				if err != nil {
					b.Fatal(err)
				}
				ctx = tel.Context(ctx)
			}
			fn := func(context.Context) error { return nil }
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				i++
				if err := l.Run(ctx, idem.Key{Job: "fresh", Period: strconv.Itoa(i)}, fn); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
