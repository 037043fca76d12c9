package idem_test

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/idemgo/idem"
)

// The hot paths' costs per operation. Files live in b.TempDir(), on
// whatever filesystem $TMPDIR is: fsync dominates the durable paths, so
// compare their ns/op only within one machine. The ratios against a
// hand-written floor and against River are in bench/ (BENCHMARKS.md).

func benchNoop(context.Context) error { return nil }

// BenchmarkRunFresh: Ledger.Run (AtLeastOnce) of a new key each time: a
// claim (not synced) and a done mark (synced).
func BenchmarkRunFresh(b *testing.B) {
	l := openLedger(b, b.TempDir())
	ctx := context.Background()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if err := l.Run(ctx, idem.Key{Job: "bench", Period: fmt.Sprintf("p%09d", i)}, benchNoop); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

// BenchmarkRunDuplicate: Ledger.Run of a key that is done: one read, no
// write, fn not run.
func BenchmarkRunDuplicate(b *testing.B) {
	l := openLedger(b, b.TempDir())
	ctx := context.Background()
	key := idem.Key{Job: "bench", Period: "2026-10-27"}
	if err := l.Run(ctx, key, benchNoop); err != nil {
		b.Fatal(err)
	}
	fn := func(context.Context) error {
		b.Fatal("fn ran for a done key")
		return nil
	}
	b.ReportAllocs()
	for b.Loop() {
		if err := l.Run(ctx, key, fn); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRunTx: Ledger.RunTx of a new key with one business upsert,
// committed with the done mark.
func BenchmarkRunTx(b *testing.B) {
	l := openLedger(b, b.TempDir())
	ctx := context.Background()
	if _, err := l.DB().ExecContext(ctx, `CREATE TABLE daily_settle(biz_date TEXT PRIMARY KEY, amount_cent INTEGER NOT NULL)`); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		day := fmt.Sprintf("p%09d", i)
		err := l.RunTx(ctx, idem.Key{Job: "settle", Period: day}, func(ctx context.Context, tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, `INSERT INTO daily_settle(biz_date, amount_cent) VALUES(?, ?)
				ON CONFLICT(biz_date) DO UPDATE SET amount_cent = excluded.amount_cent
				WHERE daily_settle.amount_cent <> excluded.amount_cent`, day, i)
			return err
		})
		if err != nil {
			b.Fatal(err)
		}
		i++
	}
}

// BenchmarkStateFileRun: StateFile.Run (AtLeastOnce) of the next period of
// one job: one durable replace of the file (temp file, fsync, rename,
// directory fsync).
func BenchmarkStateFileRun(b *testing.B) {
	s, err := idem.OpenStateFile(filepath.Join(b.TempDir(), "state.json"))
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if err := s.Run(ctx, idem.Key{Job: "report", Period: fmt.Sprintf("p%09d", i)}, benchNoop); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

// BenchmarkKeyValidate: the check every Run starts with.
func BenchmarkKeyValidate(b *testing.B) {
	key := idem.Key{Job: "daily_settle", Period: "2026-10-27"}
	b.ReportAllocs()
	for b.Loop() {
		if err := key.Validate(); err != nil {
			b.Fatal(err)
		}
	}
}
