package main

import (
	"context"
	"os"
	"testing"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemstore"
	"github.com/idemgo/idem/internal/testwait"
)

func TestMain(m *testing.M) {
	if dir := os.Getenv(childEnv); dir != "" {
		child(dir) // the demo re-executes this binary as the relay it kills
		return
	}
	os.Exit(m.Run())
}

// TestDemo runs the demo: the relay killed after the receiver applied the
// notification and before it was marked delivered, the next relay's
// duplicate ignored by its key, one notification per day.
func TestDemo(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), testwait.Limit(t))
	defer cancel()
	rep, err := demo(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Applied) != 2 || rep.Applied["2026-10-27"] != 1 || rep.Applied["2026-10-28"] != 1 {
		t.Fatalf("applied %v, want one notification per day", rep.Applied)
	}
	if rep.Requests != 3 { // 2026-10-27 twice (the killed relay's and the next one's), 2026-10-28 once
		t.Fatalf("%d requests, want 3", rep.Requests)
	}
	l, err := open(dir, &clock{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	msgs, err := l.ListOutbox(ctx, idemstore.OutboxFilter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(msgs) != 2 {
		t.Fatalf("%d messages in the outbox, want 2: %+v", len(msgs), msgs)
	}
	for _, m := range msgs {
		if m.Status != idemstore.OutboxDelivered {
			t.Errorf("%s: %s, want delivered", m.ID, m.Status)
		}
		if want := (idem.Key{Job: "daily_settle", Period: m.Key.Period}).RequestID() + "-0"; m.ID != want {
			t.Errorf("message of %s has id %s, want %s (the key's request id, message 0)", m.Key.Period, m.ID, want)
		}
	}
	if msgs[0].Attempts != 2 || msgs[1].Attempts != 1 {
		t.Errorf("attempts %d and %d, want 2 (the killed relay's, then the next one's) and 1", msgs[0].Attempts, msgs[1].Attempts)
	}
}
