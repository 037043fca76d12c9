package main

import (
	"context"

	"github.com/idemgo/idem"
	idemotel "github.com/idemgo/idem/otel"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// otelSDKNote says what the sdk side of the otel_sdk_ lines adds to a Run.
const otelSDKNote = "sdk: idem/otel over the OpenTelemetry SDK, spans through a batching span processor " +
	"(exporter discards) and metrics (Telemetry.Option) through a meter provider with a manual reader; plain: no adapter; " +
	"the same Run on a ledger of each side's own"

// otelSDK is the OpenTelemetry SDK as a service sets it up: a tracer
// provider with a batching span processor (its exporter discards the
// batches) and a meter provider with a reader (a manual one: nothing
// collects during the run, so the measured cost is what recording a
// call's metrics costs the call). shutdown stops both.
func otelSDK() (tel *idemotel.Telemetry, shutdown func(), err error) {
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(tracetest.NewNoopExporter()))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	shutdown = func() {
		_ = tp.Shutdown(context.Background())
		_ = mp.Shutdown(context.Background())
	}
	tel, err = idemotel.New(tp, mp)
	if err != nil {
		shutdown()
		return nil, nil, err
	}
	return tel, shutdown, nil
}

// withOptions is a runner whose every Run is also given opts.
type withOptions struct {
	runner
	opts []idem.Option
}

func (w withOptions) Run(ctx context.Context, key idem.Key, fn func(context.Context) error, opts ...idem.Option) error {
	if len(opts) == 0 {
		// As a caller passing w.opts itself: no slice made per Run.
		return w.runner.Run(ctx, key, fn, w.opts...)
	}
	return w.runner.Run(ctx, key, fn, append(opts, w.opts...)...)
}

// traced is s run in tel's context: its Runs are traced.
func traced(s side, tel *idemotel.Telemetry) side {
	return side{prep: s.prep, ops: func(ctx context.Context, round int) (int, error) {
		return s.ops(tel.Context(ctx), round)
	}}
}

// otelSides opens a ledger for each side of an otel_sdk_ line (in
// directories of their own, removed by cleanup) and the SDK; the sdk
// side's runner records the metrics of its Runs.
func otelSides(ctx context.Context) (sdkLedger runner, plain *idem.Ledger, tel *idemotel.Telemetry, cleanup func(), err error) {
	_, ls, cleanS, err := ledgerInTempDir(ctx, "otel-sdk")
	if err != nil {
		return nil, nil, nil, nil, err
	}
	_, lp, cleanP, err := ledgerInTempDir(ctx, "otel-plain")
	if err != nil {
		cleanS()
		return nil, nil, nil, nil, err
	}
	tel, shutdown, err := otelSDK()
	if err != nil {
		cleanS()
		cleanP()
		return nil, nil, nil, nil, err
	}
	return withOptions{ls, []idem.Option{tel.Option()}}, lp, tel, func() { shutdown(); cleanS(); cleanP() }, nil
}

// otelFreshRoundMin is the fewest fresh Runs a round of
// otel_sdk_fresh_run_vs_plain makes on each side (flag -otel-round-min;
// the module's tests, which check that each line runs, set none). The
// line measures a difference of about a tenth, and a round of the default
// -n (200) lasts about 70 ms, short enough for one slow fsync or one
// garbage collection to swing it: ten runs in a row read 0.78-0.93 at 200
// Runs a round, eight read 0.86-0.92 at 1,000 (the same code, mean 0.88 in
// both).
const otelFreshRoundMin = 1000

// otelSDKFreshRunVsPlain: Ledger.Run (AtLeastOnce) of new keys traced and
// measured by idem/otel over the SDK (otelSDK) against the same Run with
// no adapter, max(cfg.n, cfg.otelRoundMin) Runs a round. otel_overhead
// splits the cost further (no-op provider, spans only).
func otelSDKFreshRunVsPlain(ctx context.Context, cfg config) (result, error) {
	sdkLedger, plain, tel, cleanup, err := otelSides(ctx)
	if err != nil {
		return result{}, err
	}
	defer cleanup()
	n := max(cfg.n, cfg.otelRoundMin)
	res, err := alternate(ctx, cfg, traced(ledgerFreshSide(sdkLedger, n), tel), ledgerFreshSide(plain, n))
	res.note = otelSDKNote
	return res, err
}

// otelSDKDuplicateVsPlain: Ledger.Run of keys already done (duplicate_vs_floor's
// idem side) with idem/otel over the SDK against the same with no adapter.
func otelSDKDuplicateVsPlain(ctx context.Context, cfg config) (result, error) {
	sdkLedger, plain, tel, cleanup, err := otelSides(ctx)
	if err != nil {
		return result{}, err
	}
	defer cleanup()
	keys := roundKeys("dup", 0, cfg.n)
	sdkSide, err := ledgerDuplicateSide(tel.Context(ctx), sdkLedger, keys)
	if err != nil {
		return result{}, err
	}
	plainSide, err := ledgerDuplicateSide(ctx, plain, keys)
	if err != nil {
		return result{}, err
	}
	res, err := alternate(ctx, cfg, traced(sdkSide, tel), plainSide)
	res.note = otelSDKNote
	return res, err
}
