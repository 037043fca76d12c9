package pgledger_test

import (
	"context"
	"testing"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/pgledger"
	"github.com/jackc/pgx/v5"
)

// TestNextSchemaShared: a schema that the next release has migrated
// (version SchemaVersion+1, with what it added: a new column of runs with a
// default, a new table) is attached to, and Run and RunTx work on it; the
// stored version is left as it is (no downgrade).
func TestNextSchemaShared(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	ctx := context.Background()
	l := openLedger(t, pool)
	next := pgledger.SchemaVersion + 1
	for _, q := range []string{
		`ALTER TABLE ` + table(l, "runs") + ` ADD COLUMN next_release integer NOT NULL DEFAULT 0`,
		`CREATE TABLE ` + table(l, "next_release") + ` (job text NOT NULL, period text NOT NULL, PRIMARY KEY (job, period))`,
	} {
		if _, err := pool.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	if _, err := pool.Exec(ctx, `UPDATE `+table(l, "meta")+` SET value = $1 WHERE name = 'schema_version'`, next); err != nil {
		t.Fatal(err)
	}

	l2, err := pgledger.New(ctx, pool, pgledger.WithSchema(l.Schema()))
	if err != nil {
		t.Fatalf("New on a version-%d schema (this pgledger knows %d): %v", next, pgledger.SchemaVersion, err)
	}
	defer l2.Close()
	ran := 0
	key := idem.Key{Job: "next", Period: "2026-01-01"}
	for range 2 {
		if err := l2.Run(ctx, key, func(context.Context) error { ran++; return nil }); err != nil {
			t.Fatalf("Run %s: %v", key, err)
		}
	}
	if ran != 1 {
		t.Fatalf("Run's fn ran %d times, want once", ran)
	}
	txKey := idem.Key{Job: "next", Period: "2026-01-02"}
	if err := l2.RunTx(ctx, txKey, func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO `+table(l, "next_release")+`(job, period) VALUES('next', 'tx')`)
		return err
	}); err != nil {
		t.Fatalf("RunTx %s: %v", txKey, err)
	}
	var v, done int
	if err := pool.QueryRow(ctx, `SELECT value FROM `+table(l, "meta")+` WHERE name = 'schema_version'`).Scan(&v); err != nil || v != next {
		t.Fatalf("stored version %d (%v), want %d left as it was", v, err, next)
	}
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM `+table(l, "runs")+` WHERE status = 'done'`).Scan(&done); err != nil || done != 2 {
		t.Fatalf("%d keys done (%v), want 2", done, err)
	}
}
