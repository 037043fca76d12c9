package main

import (
	"context"
	"os"
	"testing"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/internal/testwait"
)

func TestMain(m *testing.M) {
	if dir := os.Getenv(childEnv); dir != "" {
		child(dir) // the demo re-executes this binary as its victim
		return
	}
	os.Exit(m.Run())
}

func TestDemo(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), testwait.Limit(t))
	defer cancel()
	if err := demo(ctx, dir); err != nil {
		t.Fatal(err)
	}
	a, err := open(dir)
	if err != nil {
		t.Fatal(err)
	}
	got := a.gw.outbox()
	if len(got) != 2 || got[0] != "report for 2026-10-27" || got[1] != "report for 2026-10-28" {
		t.Fatalf("outbox %q, want one mail per day", got)
	}
	rec, _, err := a.state.Lookup(context.Background(), idem.Key{Job: "daily_report", Period: "2026-10-28"})
	if err != nil || rec.Status != idem.StatusDone {
		t.Fatalf("2026-10-28: %+v, %v", rec, err)
	}
}
