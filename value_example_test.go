package idem_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/idemgo/idem"
)

// A settlement's total is computed once; every later trigger of the period
// gets the stored total, and fn does not run again.
func ExampleRunValueOn() {
	dir, _ := os.MkdirTemp("", "idem-example")
	defer os.RemoveAll(dir)
	l, err := idem.OpenLedger(filepath.Join(dir, "ledger.db"))
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()

	type total struct {
		Cents    int64  `json:"cents"`
		Currency string `json:"currency"`
	}
	key := idem.Key{Job: "daily_settle", Period: "2026-10-27"}
	for range 2 {
		var res idem.Result
		t, err := idem.RunValueOn(context.Background(), l, key, func(ctx context.Context) (total, error) {
			fmt.Println("settling", key.Period)
			return total{Cents: 123456, Currency: "EUR"}, nil
		}, idem.ReportTo(&res))
		fmt.Println(t, err, res.Outcome, string(res.Value))
	}
	// Output:
	// settling 2026-10-27
	// {123456 EUR} <nil> ran {"cents":123456,"currency":"EUR"}
	// {123456 EUR} <nil> already_done {"cents":123456,"currency":"EUR"}
}

// A period first run with one rate table is not run again with another:
// the second call returns ErrParamsMismatch and runs nothing.
func ExampleWithParams() {
	dir, _ := os.MkdirTemp("", "idem-example")
	defer os.RemoveAll(dir)
	l, err := idem.OpenLedger(filepath.Join(dir, "ledger.db"))
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()

	key := idem.Key{Job: "daily_settle", Period: "2026-10-27"}
	settle := func(ctx context.Context) error { fmt.Println("settling"); return nil }
	type rates struct{ Table, Version string }
	fmt.Println(l.Run(context.Background(), key, settle, idem.WithParams(rates{"eur", "v3"})))
	fmt.Println(l.Run(context.Background(), key, settle, idem.WithParams(rates{"eur", "v3"})))
	err = l.Run(context.Background(), key, settle, idem.WithParams(rates{"eur", "v4"}))
	fmt.Println(errors.Is(err, idem.ErrParamsMismatch))
	// Output:
	// settling
	// <nil>
	// <nil>
	// true
}
