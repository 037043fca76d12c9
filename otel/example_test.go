package idemotel_test

import (
	"context"
	"database/sql"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"

	"github.com/idemgo/idem"
	idemotel "github.com/idemgo/idem/otel"
	"github.com/idemgo/idem/outbox"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// A RunTx queues a message in its transaction; the relay delivers it to a
// webhook. The receiver's request carries the trace context of the
// delivery's span, a child of the RunTx's attempt: one trace from the job
// to the receiving service.
func Example() {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	defer tp.Shutdown(context.Background())
	tel, err := idemotel.New(tp, nil) // nil: the global meter provider
	if err != nil {
		log.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "idemotel")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	ledger, err := idem.OpenLedger(filepath.Join(dir, "ledger.db"))
	if err != nil {
		log.Fatal(err)
	}
	defer ledger.Close()

	ctx := tel.Context(context.Background()) // every Run and relay under ctx is traced
	key := idem.Key{Job: "settle", Period: "2026-12-01"}
	err = ledger.RunTx(ctx, key, func(ctx context.Context, tx *sql.Tx) error {
		_, err := outbox.Put(ctx, tx, outbox.Message{Topic: "payments", Payload: []byte(`{"day":"2026-12-01"}`)})
		return err
	}, tel.Option())
	if err != nil {
		log.Fatal(err)
	}

	var received trace.SpanContext
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// The receiving service would start its span from this context.
		rctx := propagation.TraceContext{}.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
		received = trace.SpanContextFromContext(rctx)
		w.WriteHeader(http.StatusNoContent)
	}))
	defer receiver.Close()
	if _, err := outbox.RelayOnce(ctx, ledger, outbox.Webhook(receiver.URL, nil), tel.RelayOption()); err != nil {
		log.Fatal(err)
	}

	spans := exp.GetSpans()
	names := map[trace.SpanID]string{}
	for _, s := range spans {
		names[s.SpanContext.SpanID()] = s.Name
	}
	for _, s := range spans {
		parent := names[s.Parent.SpanID()]
		if parent == "" {
			parent = "(root)"
		}
		fmt.Printf("%-24s in %-20s same trace: %v\n", s.Name, parent, s.SpanContext.TraceID() == received.TraceID())
	}
	fmt.Println("the receiver's parent span:", names[received.SpanID()])
	// Output:
	// attempt settle           in idem.RunTx settle    same trace: true
	// idem.RunTx settle        in (root)               same trace: true
	// outbox.deliver payments  in attempt settle       same trace: true
	// the receiver's parent span: outbox.deliver payments
}
