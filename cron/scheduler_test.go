package cron_test

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/cron"
	"github.com/idemgo/idem/internal/schedtest"
)

// TestSchedulerDST runs cron jobs through the DST days of New York, London
// and Lord Howe in a Scheduler, minute by minute of a fake clock, under
// each gap and fold policy: the slots the policy says fire, each once, in
// order, and no others.
func TestSchedulerDST(t *testing.T) {
	type policy struct {
		name string
		opts []cron.Option
	}
	policies := []policy{{"default", nil}, {"skip-gap", []cron.Option{cron.SkipGap()}}, {"fold-both", []cron.Option{cron.FoldBoth()}}}
	cases := []struct {
		zone, day, spec string
		// the slots (UTC) of the day's night, from 00:00 to 04:00 local, by policy
		want map[string][]string
	}{
		{"America/New_York", "2026-03-08", "30 1,2 * * *", map[string][]string{
			"default":   {"2026-03-08T06:30Z", "2026-03-08T07:00Z"}, // 01:30 EST; 02:30 does not exist: 03:00 EDT
			"skip-gap":  {"2026-03-08T06:30Z"},
			"fold-both": {"2026-03-08T06:30Z", "2026-03-08T07:00Z"},
		}},
		{"America/New_York", "2026-11-01", "30 1,2 * * *", map[string][]string{
			"default":   {"2026-11-01T05:30Z", "2026-11-01T07:30Z"}, // 01:30 EDT, 02:30 EST
			"skip-gap":  {"2026-11-01T05:30Z", "2026-11-01T07:30Z"},
			"fold-both": {"2026-11-01T05:30Z", "2026-11-01T06:30Z", "2026-11-01T07:30Z"}, // and 01:30 EST
		}},
		{"Europe/London", "2026-03-29", "30 1 * * *", map[string][]string{
			"default":   {"2026-03-29T01:00Z"}, // 01:30 does not exist: 02:00 BST
			"skip-gap":  {},
			"fold-both": {"2026-03-29T01:00Z"},
		}},
		{"Europe/London", "2026-10-25", "30 1 * * *", map[string][]string{
			"default":   {"2026-10-25T00:30Z"},
			"skip-gap":  {"2026-10-25T00:30Z"},
			"fold-both": {"2026-10-25T00:30Z", "2026-10-25T01:30Z"},
		}},
		{"Australia/Lord_Howe", "2026-10-04", "15 2 * * *", map[string][]string{
			"default":   {"2026-10-03T15:30Z"}, // 02:15 does not exist (02:00 -> 02:30): 02:30 +11
			"skip-gap":  {},
			"fold-both": {"2026-10-03T15:30Z"},
		}},
		{"Australia/Lord_Howe", "2026-04-05", "45 1 * * *", map[string][]string{
			"default":   {"2026-04-04T14:45Z"}, // 01:45 +11
			"skip-gap":  {"2026-04-04T14:45Z"},
			"fold-both": {"2026-04-04T14:45Z", "2026-04-04T15:15Z"}, // and 01:45 +10:30
		}},
	}
	for _, tc := range cases {
		for _, pol := range policies {
			t.Run(tc.zone+"/"+tc.day+"/"+pol.name, func(t *testing.T) {
				loc := schedtest.Location(t, tc.zone)
				sched, err := cron.New(tc.spec, loc, pol.opts...)
				if err != nil {
					t.Fatal(err)
				}
				night := schedtest.LocalDay(t, tc.day, loc).Add(-12 * time.Hour) // midnight, near enough
				from, to := night.Add(-2*time.Hour), night.Add(6*time.Hour)
				clk := schedtest.NewClock(from)
				l, err := idem.OpenLedger(filepath.Join(t.TempDir(), "ledger.db"))
				if err != nil {
					t.Fatal(err)
				}
				defer l.Close()
				s := idem.NewScheduler(l, idem.WithClock(clk))
				var mu sync.Mutex
				var ran []string
				fn := func(_ context.Context, p idem.Period) error {
					mu.Lock()
					defer mu.Unlock()
					ran = append(ran, p.Name)
					return nil
				}
				// Due at its start: the slot fires the period.
				if err := s.Add("cron", sched, fn, idem.DueAtStart()); err != nil {
					t.Fatal(err)
				}
				done := make(chan error, 1)
				go func() { done <- s.Run(context.Background()) }()
				defer func() {
					if err := s.Shutdown(context.Background()); err != nil {
						t.Error(err)
					}
					if err := <-done; !errors.Is(err, idem.ErrSchedulerClosed) {
						t.Error(err)
					}
				}()
				for !clk.Now().After(to) {
					schedtest.Idle(t, s, clk.Now())
					clk.Advance(5 * time.Minute) // past a recheck, onto every slot
				}
				schedtest.Idle(t, s, clk.Now())
				mu.Lock()
				defer mu.Unlock()
				// The first look runs the period due at the start (before
				// the night); then the night's slots, in order, once each.
				want := append([]string{sched.At(from).Name}, tc.want[pol.name]...)
				if !slices.Equal(ran, want) {
					t.Errorf("ran %v, want %v", ran, want)
				}
				var walked []string
				for p := sched.At(from); !p.Start.After(clk.Now()); p = sched.Next(p) {
					walked = append(walked, p.Name)
				}
				if !slices.Equal(ran, walked) {
					t.Errorf("ran %v, the schedule's periods are %v", ran, walked)
				}
			})
		}
	}
}
