package idem_test

// Code that docs/*.md quotes, compiled and run here (TestDocsGoSnippets
// checks that every Go block of the docs pages appears in a .go file).

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemtest"
)

// docs/operators.md's first example: an AtMostOnce mail whose run died
// after its claim is unknown until a person says what happened.
func ExampleLedger_Resolve() {
	dir, _ := os.MkdirTemp("", "idem-example")
	defer os.RemoveAll(dir)
	clk := idemtest.NewClock(time.Date(2026, 11, 1, 9, 0, 0, 0, time.UTC))
	l, err := idem.OpenLedger(filepath.Join(dir, "ledger.db"), idem.WithClock(clk))
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()
	ctx := context.Background()
	sendMail := func(ctx context.Context) error {
		fmt.Println("mailing the October statement")
		return nil
	}

	key := idem.Key{Job: "month_end_mail", Period: "2026-10"}
	// A run dies after the mail went out, before its done mark.
	_ = l.Run(idemtest.CrashAt(ctx, idemtest.AfterFn), key, sendMail, idem.AtMostOnce())
	clk.Advance(idem.DefaultLease + time.Second) // its lease runs out

	err = l.Run(ctx, key, sendMail, idem.AtMostOnce())
	fmt.Println("unknown:", errors.Is(err, idem.ErrUnknownOutcome)) // exit 5 from `idem run`

	// The mail server's log shows the statement went out: mark the period done.
	if err := l.Resolve(ctx, key, idem.ResolveDone); err != nil {
		log.Fatal(err)
	}
	err = l.Run(ctx, key, sendMail, idem.AtMostOnce())
	fmt.Println("after Resolve:", err) // already done: nothing mailed
	// Output:
	// mailing the October statement
	// unknown: true
	// after Resolve: <nil>
}

// docs/operators.md's "Repairing data": October's settlements were
// computed from a flow table that has since been corrected; a re-run
// request makes each day run once more.
func ExampleRerun() {
	dir, _ := os.MkdirTemp("", "idem-example")
	defer os.RemoveAll(dir)
	l, err := idem.OpenLedger(filepath.Join(dir, "ledger.db"))
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()
	ctx := context.Background()
	settle := func(ctx context.Context) error {
		info, _ := idem.InfoFrom(ctx)
		fmt.Printf("settling %s, revision %d\n", info.Key.Period, info.Revision)
		return nil // an upsert of the recomputed amounts: SET amount = ?, never amount = amount + ?
	}
	key := idem.Key{Job: "settle", Period: "2026-10-01"}
	_ = l.Run(ctx, key, settle)

	// The flow table was corrected: run the day again, once.
	out, err := idem.Rerun(ctx, l, idem.RerunRequest{
		Keys:      []idem.Key{key},
		RequestID: "INC-4711", // sent twice (a retrying script), it re-runs once
		Reason:    "flow table corrected",
		By:        "ops@example.com",
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(out[0].Key, "revision", out[0].Revision, out[0].State)
	_ = l.Run(ctx, key, settle) // the next trigger runs it once more
	_ = l.Run(ctx, key, settle) // and then it is done again
	// Output:
	// settling 2026-10-01, revision 0
	// settle/2026-10-01 revision 1 queued
	// settling 2026-10-01, revision 1
}
