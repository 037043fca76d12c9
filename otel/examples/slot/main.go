// Command slot shows one trace from a Scheduler's slot to the webhook
// receiver, exported to stdout with OpenTelemetry's stdouttrace exporter.
//
//	go run ./examples/slot            # in the otel module: the spans as JSON, then the trace as a tree
//	go run ./examples/slot -tree      # the tree alone
//
// A Scheduler runs the job "report" hourly (its first look runs the last
// hour that ended) through a transactional RunTx whose body queues a
// notification with outbox.Put; the Scheduler's relay delivers it to a
// receiving service (an HTTP server in this program) with the Webhook
// deliverer. The receiver starts its own span from the request's
// traceparent header. Every span, from the Scheduler's slot to the
// receiver's, is in one trace:
//
//	scheduler report
//	└─ catchup report
//	   └─ idem.RunTx report
//	      └─ attempt report                 (outbox.Put stores its trace context with the message)
//	         └─ outbox.deliver reports      (the relay, hours later or in another process if need be)
//	            └─ receiver POST /reports
package main

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/idemgo/idem"
	idemotel "github.com/idemgo/idem/otel"
	"github.com/idemgo/idem/outbox"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

func main() {
	tree := flag.Bool("tree", false, "print the trace as a tree only, not the spans as JSON")
	flag.Parse()
	var spans io.Writer = os.Stdout
	if *tree {
		spans = io.Discard
	}
	if err := run(context.Background(), spans, os.Stdout); err != nil {
		log.Fatal(err)
	}
}

// run runs the demo: the spans go to spansOut as JSON (stdouttrace), the
// trace's tree to treeOut.
func run(ctx context.Context, spansOut, treeOut io.Writer) error {
	stdout, err := stdouttrace.New(stdouttrace.WithWriter(spansOut), stdouttrace.WithPrettyPrint())
	if err != nil {
		return err
	}
	mem := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(stdout), sdktrace.WithSyncer(mem))
	defer tp.Shutdown(context.Background())
	tel, err := idemotel.New(tp, nil)
	if err != nil {
		return err
	}

	dir, err := os.MkdirTemp("", "idem-otel-slot")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	ledger, err := idem.OpenLedger(filepath.Join(dir, "ledger.db"))
	if err != nil {
		return err
	}
	defer ledger.Close()

	// The receiving service: its span joins the trace of the request.
	received := make(chan struct{}, 1)
	tracer := tp.Tracer("receiver")
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rctx := propagation.TraceContext{}.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
		_, span := tracer.Start(rctx, "receiver "+r.Method+" "+r.URL.Path, trace.WithSpanKind(trace.SpanKindServer))
		_, _ = io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusNoContent)
		span.End()
		select {
		case received <- struct{}{}:
		default:
		}
	}))
	defer receiver.Close()

	s := idem.NewScheduler(ledger)
	err = idem.AddTx(s, "report", idem.Hourly(time.UTC), func(ctx context.Context, tx *sql.Tx, p idem.Period) error {
		_, err := outbox.Put(ctx, tx, outbox.Message{Topic: "reports", Payload: []byte(p.Name)})
		return err
	}, tel.Option())
	if err != nil {
		return err
	}
	relay, err := outbox.NewRelay(ledger, outbox.Webhook(receiver.URL+"/reports", nil), outbox.WithPoll(10*time.Millisecond), tel.RelayOption())
	if err != nil {
		return err
	}
	if err := s.AddRelay("webhook", relay); err != nil {
		return err
	}
	sctx, cancel := context.WithCancel(tel.Context(ctx))
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- s.Run(sctx) }()
	select {
	case <-received:
	case <-time.After(time.Minute):
		return fmt.Errorf("the receiver got nothing in a minute")
	}
	if err := s.Shutdown(ctx); err != nil {
		return err
	}
	cancel()
	if err := <-done; err != nil && !errors.Is(err, idem.ErrSchedulerClosed) {
		return err
	}
	return printTree(treeOut, mem.GetSpans())
}

// printTree prints each trace of spans as a tree of span names.
func printTree(w io.Writer, spans tracetest.SpanStubs) error {
	children := map[trace.SpanID][]tracetest.SpanStub{}
	ids := map[trace.SpanID]bool{}
	for _, s := range spans {
		ids[s.SpanContext.SpanID()] = true
	}
	var roots []tracetest.SpanStub
	for _, s := range spans {
		if p := s.Parent.SpanID(); p.IsValid() && ids[p] {
			children[p] = append(children[p], s)
		} else {
			roots = append(roots, s)
		}
	}
	byStart := func(ss []tracetest.SpanStub) {
		sort.Slice(ss, func(i, k int) bool { return ss[i].StartTime.Before(ss[k].StartTime) })
	}
	byStart(roots)
	var walk func(s tracetest.SpanStub, depth int)
	walk = func(s tracetest.SpanStub, depth int) {
		fmt.Fprintf(w, "%s%s\n", strings.Repeat("   ", depth), s.Name)
		kids := children[s.SpanContext.SpanID()]
		byStart(kids)
		for _, k := range kids {
			walk(k, depth+1)
		}
	}
	for _, r := range roots {
		fmt.Fprintf(w, "trace %s:\n", r.SpanContext.TraceID())
		walk(r, 1)
	}
	return nil
}
