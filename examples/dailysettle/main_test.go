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
	l, err := open(dir, &clock{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	want := map[string]int{"2026-10-27": 1500, "2026-10-28": 500}
	rows, err := l.DB().Query(`SELECT biz_date, amount_cent FROM daily_settle`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	got := map[string]int{}
	for rows.Next() {
		var d string
		var a int
		if err := rows.Scan(&d, &a); err != nil {
			t.Fatal(err)
		}
		got[d] = a
	}
	if len(got) != len(want) || got["2026-10-27"] != 1500 || got["2026-10-28"] != 500 {
		t.Fatalf("daily_settle = %v, want %v", got, want)
	}
	rec, _, err := l.Lookup(context.Background(), idem.Key{Job: "daily_settle", Period: "2026-10-28"})
	if err != nil || rec.Status != idem.StatusDone || rec.Attempt != 1 {
		t.Fatalf("2026-10-28: %+v, %v; want done by attempt 1 (the killed one left no record)", rec, err)
	}
}
