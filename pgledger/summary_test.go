package pgledger_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemstore"
	"github.com/idemgo/idem/pgledger/internal/pgtest"
)

// TestSummaryAndPages: Summarize and ListPage say what List's records
// summarized and cut say (idemstore.SummarizeRecords, PageRecords).
func TestSummaryAndPages(t *testing.T) {
	ctx := context.Background()
	l := pgtest.OpenLedger(t, pgtest.NewPool(t))
	ok := func(context.Context) error { return nil }
	noWait := []idem.Option{idem.RetryWithin(0), idem.WithBackoff(idem.Constant(time.Hour))}
	for d := 1; d <= 6; d++ {
		if err := l.Run(ctx, idem.Key{Job: "settle", Period: fmt.Sprintf("2026-10-%02d", d)}, ok); err != nil {
			t.Fatal(err)
		}
	}
	for d := 7; d <= 8; d++ {
		if err := l.Run(ctx, idem.Key{Job: "settle", Period: fmt.Sprintf("2026-10-%02d", d)}, func(context.Context) error {
			return errors.New("bank timeout")
		}, noWait...); err == nil {
			t.Fatal("a failing Run returned nil")
		}
	}
	if err := l.Run(ctx, idem.Key{Job: "settle", Period: "2026-10-09"}, func(context.Context) error {
		return idem.Permanent(errors.New("account closed"))
	}); err == nil {
		t.Fatal("a Permanent Run returned nil")
	}
	if err := l.Run(ctx, idem.Key{Job: "pay", Period: "a"}, func(context.Context) error {
		return errors.New("connection reset")
	}, idem.AtMostOnce()); !errors.Is(err, idem.ErrUnknownOutcome) {
		t.Fatalf("AtMostOnce failure: %v", err)
	}
	recs, err := l.List(ctx, idem.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	norm := func(ss []idemstore.JobSummary) []idemstore.JobSummary {
		for i := range ss {
			ss[i].LastDoneAt, ss[i].LastChange = ss[i].LastDoneAt.UTC(), ss[i].LastChange.UTC()
		}
		return ss
	}
	got, err := l.Summarize(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if want := idemstore.SummarizeRecords(recs); !reflect.DeepEqual(norm(got), norm(want)) {
		t.Errorf("Summarize:\n%+v\nwant (from List):\n%+v", got, want)
	}
	if one, err := l.Summarize(ctx, "pay"); err != nil || len(one) != 1 || one[0].Counts[idemstore.StatusUnknown] != 1 {
		t.Errorf("Summarize(pay) = %+v, %v", one, err)
	}
	for i := range recs {
		recs[i].Value = nil
	}
	for i := range recs {
		recs[i].LeaseUntil, recs[i].NotBefore, recs[i].Updated = recs[i].LeaseUntil.UTC(), recs[i].NotBefore.UTC(), recs[i].Updated.UTC()
	}
	attention := []idemstore.Status{idemstore.StatusUnknown, idemstore.StatusParked, idemstore.StatusFailed}
	for _, q := range []idemstore.PageQuery{
		{Job: "settle", Limit: 100},
		{Job: "settle", Limit: 3},
		{Job: "settle", Before: "2026-10-08", Limit: 3},
		{Job: "settle", From: "2026-10-03", Before: "2026-10-08", Limit: 100},
		{Job: "settle", Statuses: attention, Limit: 100},
		{Job: "settle", Statuses: attention, Limit: 1},
		{Job: "pay", Statuses: attention, Limit: 100},
		{Job: "nothing", Limit: 100},
	} {
		got, err := l.ListPage(ctx, q)
		if err != nil {
			t.Fatalf("%+v: %v", q, err)
		}
		for i := range got {
			got[i].LeaseUntil, got[i].NotBefore, got[i].Updated = got[i].LeaseUntil.UTC(), got[i].NotBefore.UTC(), got[i].Updated.UTC()
		}
		want := idemstore.PageRecords(recs, q)
		if len(got) == 0 && len(want) == 0 {
			continue
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("ListPage(%+v):\n%+v\nwant (from List):\n%+v", q, got, want)
		}
	}
}
