package idemotel_test

import (
	"context"
	"database/sql"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemtest"
	"github.com/idemgo/idem/internal/testwait"
	idemotel "github.com/idemgo/idem/otel"
	"github.com/idemgo/idem/outbox"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// TestOutboxTraceSurvivesRelayKill: a message Put inside a traced RunTx
// reaches the receiver with that RunTx's trace id, also when the relay
// that delivered it first was SIGKILLed while the receiver held its
// request: the trace context is stored with the message, so the relay
// that delivers it again (here, one in the test's process once the dead
// relay's lease has run out) starts its delivery span as a child of the
// same attempt span.
func TestOutboxTraceSurvivesRelayKill(t *testing.T) {
	if idemtest.IsChild(t) {
		// The child: a traced relay, until it is killed.
		idemtest.Start(t, "", func(arg string) {
			dir, url, _ := strings.Cut(arg, "|")
			l, err := idem.OpenLedger(filepath.Join(dir, "ledger.db"))
			if err != nil {
				fmt.Println("open:", err)
				os.Exit(2)
			}
			tel, err := idemotel.New(sdktrace.NewTracerProvider(), noopMeter())
			if err != nil {
				fmt.Println("telemetry:", err)
				os.Exit(2)
			}
			err = outbox.Relay(tel.Context(context.Background()), l, outbox.Webhook(url, nil), outbox.WithPoll(5*time.Millisecond))
			fmt.Println("relay returned:", err)
			os.Exit(3)
		})
	}
	dir := t.TempDir()
	r := newRig(t)
	l, err := idem.OpenLedger(filepath.Join(dir, "ledger.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx := context.Background()
	err = l.RunTx(r.tel.Context(ctx), idem.Key{Job: "notify", Period: "p1"}, func(ctx context.Context, tx *sql.Tx) error {
		_, err := outbox.Put(ctx, tx, outbox.Message{Topic: "orders", Payload: []byte("hello")})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	att := r.one(t, "attempt notify")

	var child *idemtest.Child
	started, killed := make(chan struct{}), make(chan struct{})
	rc := newReceiver(t, func(w http.ResponseWriter, _ *http.Request, n int) {
		if n == 1 {
			<-started
			child.Kill() // before answering: the message arrived, the relay never knows
			close(killed)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	child = idemtest.Start(t, dir+"|"+rc.URL, nil)
	close(started)
	testwait.Recv(t, killed, "the receiver to get the killed relay's request")
	if e := child.Wait(); !e.Killed {
		t.Fatalf("relay child: %+v", e)
	}

	// The restart: a traced relay whose clock is past the dead relay's lease.
	clk := idemtest.NewClock(time.Now().Add(2 * outbox.DefaultLease))
	res, err := outbox.RelayOnce(r.tel.Context(ctx), l, outbox.Webhook(rc.URL, nil), outbox.WithClock(clk))
	if err != nil || res.Delivered != 1 {
		t.Fatalf("relay after the restart: %+v, %v", res, err)
	}
	h := rc.headers()
	if len(h) != 2 {
		t.Fatalf("%d requests, want the killed relay's and the restart's", len(h))
	}
	want := att.SpanContext().TraceID()
	for i, hd := range h {
		if got := traceOf(hd); got.TraceID() != want {
			t.Fatalf("request %d (attempt %s) carries trace %s, want the RunTx's %s", i+1, hd.Get("Idem-Attempt"), got.TraceID(), want)
		}
	}
	del := r.one(t, "outbox.deliver orders")
	wantParent(t, del, att)
	wantAttrs(t, del, idemotel.KeyAttempt.Int(2), idemotel.KeyOutcome.String("delivered"))
	if got := traceOf(h[1]); got.SpanID() != del.SpanContext().SpanID() {
		t.Fatalf("the restart's request carries span %s, want its delivery's %s", got.SpanID(), del.SpanContext().SpanID())
	}
}
