package idem_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"

	"github.com/idemgo/idem"
)

// TestNextSchemaShared: a ledger that the next release has migrated
// (version SchemaVersion+1, with what it added: a new column of idem_runs
// with a default, a new table) opens, and Run and RunTx work on it; the
// stored version is left as it is (no downgrade).
func TestNextSchemaShared(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	l := openLedger(t, dir)
	next := idem.SchemaVersion + 1
	for _, q := range []string{
		`ALTER TABLE idem_runs ADD COLUMN next_release INTEGER NOT NULL DEFAULT 0`,
		`CREATE TABLE idem_next_release (job TEXT NOT NULL, period TEXT NOT NULL, PRIMARY KEY (job, period))`,
	} {
		if _, err := l.DB().Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	if _, err := l.DB().Exec(`UPDATE idem_meta SET value = ? WHERE name = 'schema_version'`, next); err != nil {
		t.Fatal(err)
	}
	l.Close()

	path := filepath.Join(dir, "ledger.db")
	l, err := idem.OpenLedger(path)
	if err != nil {
		t.Fatalf("OpenLedger of a version-%d ledger (this idem knows %d): %v", next, idem.SchemaVersion, err)
	}
	defer l.Close()
	ran := 0
	key := idem.Key{Job: "next", Period: "2026-01-01"}
	for range 2 {
		if err := l.Run(ctx, key, func(context.Context) error { ran++; return nil }); err != nil {
			t.Fatalf("Run %s: %v", key, err)
		}
	}
	if ran != 1 {
		t.Fatalf("Run's fn ran %d times, want once", ran)
	}
	txKey := idem.Key{Job: "next", Period: "2026-01-02"}
	if err := l.RunTx(ctx, txKey, func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO idem_next_release(job, period) VALUES('next', 'tx')`)
		return err
	}); err != nil {
		t.Fatalf("RunTx %s: %v", txKey, err)
	}
	var v, done int
	if err := l.DB().QueryRow(`SELECT value FROM idem_meta WHERE name = 'schema_version'`).Scan(&v); err != nil || v != next {
		t.Fatalf("stored version %d (%v), want %d left as it was", v, err, next)
	}
	if err := l.DB().QueryRow(`SELECT count(*) FROM idem_runs WHERE status = 'done'`).Scan(&done); err != nil || done != 2 {
		t.Fatalf("%d keys done (%v), want 2", done, err)
	}
}
