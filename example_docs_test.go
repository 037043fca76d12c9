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
