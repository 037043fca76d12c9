package pgledger_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemstore"
	"github.com/idemgo/idem/idemtest"
	"github.com/idemgo/idem/pgledger"
	"github.com/jackc/pgx/v5"
)

// TestUpgradeFromVersion3: a schema that pgledger's version 3 wrote
// (testdata/schema-v3.sql, pg_dump of its three records) is upgraded in
// place: every record is kept, none has a fingerprint or a value, and the
// keys take fingerprints and values from then on.
func TestUpgradeFromVersion3(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	ctx := context.Background()
	dump, err := os.ReadFile("testdata/schema-v3.sql")
	if err != nil {
		t.Fatal(err)
	}
	schema := uniqueName("idemtest_v3_")
	dropSchemaLater(t, pool, schema)
	sql := strings.ReplaceAll(string(dump), "idem_v3", pgx.Identifier{schema}.Sanitize())
	// The dump empties search_path for its session; give the pool's connection its own back.
	sql += "\nSELECT pg_catalog.set_config('search_path', '\"$user\", public', false);"
	if _, err := pool.Exec(ctx, sql); err != nil {
		t.Fatalf("loading the version-3 dump: %v", err)
	}
	l, err := pgledger.New(ctx, pool, pgledger.WithSchema(schema))
	if err != nil {
		t.Fatalf("New on a version-3 schema: %v", err)
	}
	var v int
	if err := pool.QueryRow(ctx, `SELECT value FROM `+pgx.Identifier{schema, "meta"}.Sanitize()+` WHERE name = 'schema_version'`).Scan(&v); err != nil || v != pgledger.SchemaVersion {
		t.Fatalf("version %d, %v; want %d", v, err, pgledger.SchemaVersion)
	}
	recs, err := l.List(ctx, idem.Filter{Job: "daily_settle"})
	if err != nil || len(recs) != 3 {
		t.Fatalf("List: %d records, %v; want the dump's 3", len(recs), err)
	}
	for i, want := range []idem.Status{idem.StatusDone, idem.StatusDone, idem.StatusFailed} {
		if r := recs[i]; r.Status != want || r.Fingerprint != "" || r.Value != nil {
			t.Fatalf("record %d: %+v; want %s with no fingerprint or value", i, r, want)
		}
	}
	if recs[2].LastError != "bank closed" || recs[2].Failures != 1 {
		t.Fatalf("failed record %+v: lost its error or failure count", recs[2])
	}
	// A done key of version 3: no check, no value.
	done := idem.Key{Job: "daily_settle", Period: "2026-10-27"}
	var res idem.Result
	if err := l.Run(ctx, done, func(context.Context) error { t.Fatal("fn ran for a done key"); return nil },
		idem.WithParams("rates-v9"), idem.ReportTo(&res)); err != nil || res.Outcome != idem.AlreadyDone {
		t.Fatalf("Run of an upgraded done key: %v, %v", err, res.Outcome)
	}
	if _, err := idem.RunValueOn(ctx, l, done, func(context.Context) (int, error) { return 1, nil }); !errors.Is(err, idem.ErrNoValue) {
		t.Fatalf("RunValue of an upgraded done key: %v, want ErrNoValue", err)
	}
	// A new key takes both.
	k := idem.Key{Job: "daily_settle", Period: "2026-10-29"}
	if got, err := idem.RunValueOn(ctx, l, k, func(context.Context) (int, error) { return 42, nil }, idem.WithParams("rates-v9")); err != nil || got != 42 {
		t.Fatalf("RunValue of a new key: %v, %v", got, err)
	}
	if _, err := idem.RunValueOn(ctx, l, k, func(context.Context) (int, error) { return 0, nil }, idem.WithParams("rates-v10")); !errors.Is(err, idem.ErrParamsMismatch) {
		t.Fatalf("other params: %v, want ErrParamsMismatch", err)
	}
}

// TestRunTxValue: RunTxValue through pgx.Tx stores fn's value in the
// transaction of fn's writes; a crash before the commit leaves neither,
// and the next call computes it again with its writes.
func TestRunTxValue(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	ctx := context.Background()
	l := openLedger(t, pool)
	tbl := pgx.Identifier{l.Schema(), "totals"}.Sanitize()
	if _, err := pool.Exec(ctx, `CREATE TABLE `+tbl+` (period text PRIMARY KEY, cents bigint NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	k := idem.Key{Job: "settle", Period: "2026-10-27"}
	runs := 0
	fn := func(ctx context.Context, tx pgx.Tx) (int64, error) {
		runs++
		cents := int64(1000 + runs)
		_, err := tx.Exec(ctx, `INSERT INTO `+tbl+` VALUES ($1, $2) ON CONFLICT (period) DO UPDATE SET cents = excluded.cents`, k.Period, cents)
		return cents, err
	}
	if _, err := idem.RunTxValue(idemtest.CrashAt(ctx, idemstore.AfterFn), l, k, fn); !errors.Is(err, idemtest.ErrCrashed) {
		t.Fatalf("crashing run: %v", err)
	}
	var rows int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM `+tbl).Scan(&rows); err != nil || rows != 0 {
		t.Fatalf("%d rows after the crash (%v), want none", rows, err)
	}
	shift(t, l, idem.DefaultLease+time.Second) // the crashed attempt's lease expires
	got, err := idem.RunTxValue(ctx, l, k, fn)
	if err != nil || got != 1002 {
		t.Fatalf("second run: %v, %v; want run 2's value", got, err)
	}
	for i := range 100 {
		if v, err := idem.RunTxValue(ctx, l, k, fn); err != nil || v != got {
			t.Fatalf("trigger %d: %v, %v; want %v", i, v, err, got)
		}
	}
	var cents int64
	if err := pool.QueryRow(ctx, `SELECT cents FROM `+tbl).Scan(&cents); err != nil || cents != got || runs != 2 {
		t.Fatalf("business row %d (%v) after %d runs; want %d, 2 runs", cents, err, runs, got)
	}
}
