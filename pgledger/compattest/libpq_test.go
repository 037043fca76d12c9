package compattest_test

import (
	"context"
	"database/sql"
	"slices"
	"testing"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemstore"
	"github.com/idemgo/idem/idemtest"
	"github.com/idemgo/idem/internal/crashcheck"
	"github.com/idemgo/idem/pgledger"
	"github.com/idemgo/idem/pgledger/internal/pgtest"
)

// TestLibpqConformance runs idem's store conformance suite on the DBLedger
// through lib/pq.
func TestLibpqConformance(t *testing.T) {
	t.Parallel()
	testDSN(t)
	idemtest.TestStore(t, pgtest.DBHarness(t, libpq))
}

// TestLibpqModel is pgledger's TestDBModel through lib/pq: the ledger
// against idemtest's reference model, its RunTx and CatchUpTx jobs writing
// through the *sql.Tx.
func TestLibpqModel(t *testing.T) {
	t.Parallel()
	testDSN(t)
	h := pgtest.DBHarness(t, libpq)
	h.Tx = pgtest.ModelTxFor[*pgledger.DBLedger](func(ctx context.Context, tx *sql.Tx, q string, args ...any) error {
		_, err := tx.ExecContext(ctx, q, args...)
		return err
	})
	idemtest.TestModel(t, h, idemtest.ModelOptions{Parallel: true})
}

// TestLibpqCrashKit runs the crash kit's checks (crashcheck.All) on the
// DBLedger through lib/pq.
func TestLibpqCrashKit(t *testing.T) {
	t.Parallel()
	db := openDB(t, libpq)
	crashcheck.All(t, func(t *testing.T) crashcheck.Store { return openDBLedger(t, db) })
}

// TestLibpqLimits runs idemtest's conformance suite of
// idemstore.LimitStore on the DBLedger through lib/pq.
func TestLibpqLimits(t *testing.T) {
	t.Parallel()
	db := openDB(t, libpq)
	idemtest.TestLimits(t, func(t *testing.T) idem.Store { return openDBLedger(t, db) })
}

// TestLibpqOutbox runs idemtest's outbox suite on the DBLedger through
// lib/pq.
func TestLibpqOutbox(t *testing.T) {
	t.Parallel()
	db := openDB(t, libpq)
	idemtest.TestOutbox(t, idemtest.OutboxHarness[*sql.Tx]{Open: func(t *testing.T) idem.TxStore[*sql.Tx] { return openDBLedger(t, db) }, Shift: pgtest.KitShift})
}

// TestLibpqItemArrays: item ids that PostgreSQL's array syntax must quote
// or escape (commas, quotes, backslashes, braces, spaces, the word NULL) go
// out in an array argument and come back in a text[] column unchanged
// through lib/pq.
func TestLibpqItemArrays(t *testing.T) {
	t.Parallel()
	items := []string{`a,b`, `"q"`, `back\slash`, `NULL`, ` sp `, `{x}`, `é`, `plain`}
	ctx := context.Background()
	l := openDBLedger(t, openDB(t, libpq))
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
}

// TestLibpqSharesLedger: a Ledger on a pgx pool and a DBLedger on lib/pq in
// the same schema are one ledger: a key the one ran is done for the other.
func TestLibpqSharesLedger(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l := openLedger(t, newPool(t))
	d, err := pgledger.NewDB(ctx, openDB(t, libpq), pgledger.WithSchema(l.Schema()))
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
