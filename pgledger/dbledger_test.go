package pgledger_test

import (
	"context"
	"database/sql"
	"slices"
	"testing"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemstore"
	"github.com/idemgo/idem/idemtest"
	"github.com/idemgo/idem/pgledger"
	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx"
)

// TestDBConformance runs idem's conformance suite on the DBLedger with each
// driver.
func TestDBConformance(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, driver string) {
		idemtest.TestStore(t, dbHarness(t, driver))
	})
}

// TestDBModel is TestModel on the DBLedger with each driver, its RunTx and
// CatchUpTx jobs writing through the *sql.Tx, with store faults (failed in
// Go).
func TestDBModel(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, driver string) {
		h := dbHarness(t, driver)
		h.Tx = modelTxFor[*pgledger.DBLedger](func(ctx context.Context, tx *sql.Tx, q string, args ...any) error {
			_, err := tx.ExecContext(ctx, q, args...)
			return err
		})
		idemtest.TestModel(t, h, idemtest.ModelOptions{Parallel: true, Faults: true})
	})
}

// TestDBSharesLedger: a Ledger on a pool and a DBLedger on a *sql.DB in the
// same schema are one ledger: a key the one ran is done for the other.
func TestDBSharesLedger(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l := openLedger(t, newPool(t))
	d, err := pgledger.NewDB(ctx, openDB(t, "pgx"), pgledger.WithSchema(l.Schema()))
	if err != nil {
		t.Fatal(err)
	}
	k := idem.Key{Job: "settle", Period: "2026-10-27"}
	if err := l.Run(ctx, k, func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
	ran := false
	var res idem.Result
	err = d.Run(ctx, k, func(context.Context) error { ran = true; return nil }, idem.ReportTo(&res))
	if err != nil || ran || res.Outcome != idem.AlreadyDone {
		t.Fatalf("DBLedger after Ledger: err %v, ran %v, outcome %v", err, ran, res.Outcome)
	}
	rec, ok, err := d.Lookup(ctx, k)
	if err != nil || !ok || rec.Status != idem.StatusDone || rec.Updated.IsZero() {
		t.Fatalf("Lookup: %+v %v %v", rec, ok, err)
	}
}

// TestDBItemArrays: item ids that PostgreSQL's array syntax must quote or
// escape (commas, quotes, backslashes, braces, spaces, the word NULL) go
// out in an array argument and come back in a text[] column unchanged,
// with each driver.
func TestDBItemArrays(t *testing.T) {
	t.Parallel()
	items := []string{`a,b`, `"q"`, `back\slash`, `NULL`, ` sp `, `{x}`, `é`, `plain`}
	eachDriver(t, func(t *testing.T, driver string) {
		ctx := context.Background()
		l := openDBLedger(t, openDB(t, driver))
		key := idem.Key{Job: "fan", Period: "2026-10-27"}
		if err := l.AddItems(ctx, key, items); err != nil {
			t.Fatal(err)
		}
		b, err := l.ClaimItems(ctx, key, idemstore.ItemClaimRequest{Owner: "o", N: len(items)})
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, c := range b.Items {
			got = append(got, c.Item)
		}
		if !slices.Equal(got, items) {
			t.Fatalf("claimed %q, added %q", got, items)
		}
	})
}
