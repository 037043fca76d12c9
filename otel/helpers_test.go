package idemotel_test

import (
	idemotel "github.com/idemgo/idem/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
)

func noopMeter() metric.MeterProvider { return noop.NewMeterProvider() }

func KeyOutcome(s string) attribute.KeyValue { return idemotel.KeyOutcome.String(s) }
func KeyPrevious(n int64) attribute.KeyValue { return idemotel.KeyPreviousAttempt.Int64(n) }
