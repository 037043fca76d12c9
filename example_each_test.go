package idem_test

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"iter"
	"log"
	"os"
	"path/filepath"
	"slices"
	"sync"

	"github.com/idemgo/idem"
)

// Each does a period's work item by item, each item once: here, a day's
// points for every account. Run twice, as a retried cron job would be, it
// grants them once.
func ExampleEach() {
	dir, _ := os.MkdirTemp("", "idem-example")
	defer os.RemoveAll(dir)
	l, err := idem.OpenLedger(filepath.Join(dir, "ledger.db"))
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()

	var mu sync.Mutex
	granted := map[string]int{} // the downstream: points by account
	grant := func(ctx context.Context, account string) error {
		mu.Lock() // fn runs on several workers at once
		defer mu.Unlock()
		granted[account] += 10
		return nil
	}
	accounts := idem.Items(slices.Values([]string{"a1", "a2", "a3"}))
	key := idem.Key{Job: "daily_points", Period: "2026-10-27"}
	for range 2 {
		res, err := idem.Each(context.Background(), l, key, accounts, grant)
		fmt.Println(res.Outcome, res.Counts.Done, "items done, err:", err)
	}
	fmt.Println(granted)
	// Output:
	// ran 3 items done, err: <nil>
	// already_done 3 items done, err: <nil>
	// map[a1:10 a2:10 a3:10]
}

// eligibleAccounts streams the ids of the accounts that earn points for
// day: here, every account in the table.
func eligibleAccounts(ctx context.Context, db *sql.DB, day string) iter.Seq2[string, error] {
	return func(yield func(string, error) bool) {
		rows, err := db.QueryContext(ctx, `SELECT id FROM accounts ORDER BY id`)
		if err != nil {
			yield("", err)
			return
		}
		var ids []string // read them all first: the rows must not hold a read transaction open while EachTx writes
		for rows.Next() {
			var id string
			if err := rows.Scan(&id); err != nil {
				rows.Close()
				yield("", err)
				return
			}
			ids = append(ids, id)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			yield("", err)
			return
		}
		for _, id := range ids {
			if !yield(id, nil) {
				return
			}
		}
	}
}

// grantPoints grants 10 points to every eligible account for day, each once.
func grantPoints(ctx context.Context, ledger *idem.Ledger, day string) (idem.EachResult, error) {
	res, err := idem.EachTx(ctx, ledger, idem.Key{Job: "daily_points", Period: day}, eligibleAccounts(ctx, ledger.DB(), day),
		func(ctx context.Context, tx *sql.Tx, account string) error {
			_, err := tx.ExecContext(ctx, `UPDATE accounts SET points = points + 10 WHERE id = ?`, account)
			return err // committed with the item's done mark: exactly once
		}, idem.WithWorkers(4), idem.OnProgress(func(p idem.Progress) { log.Printf("%d/%d", p.Done, p.Total) }))
	return res, err
}

// The fan-out example of docs/fanout.md: points granted twice for a day are granted
// once per account.
func ExampleEachTx() {
	log.SetOutput(io.Discard) // the progress lines
	defer log.SetOutput(os.Stderr)
	dir, _ := os.MkdirTemp("", "idem-example")
	defer os.RemoveAll(dir)
	l, err := idem.OpenLedger(filepath.Join(dir, "ledger.db"))
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()
	if _, err := l.DB().Exec(`CREATE TABLE accounts(id TEXT PRIMARY KEY, points INTEGER NOT NULL DEFAULT 0);
		INSERT INTO accounts(id) VALUES ('a1'), ('a2'), ('a3');`); err != nil {
		log.Fatal(err)
	}
	for range 2 {
		res, err := grantPoints(context.Background(), l, "2026-10-27")
		fmt.Println(res.Outcome, res.Counts.Done, err)
	}
	var total int
	_ = l.DB().QueryRow(`SELECT sum(points) FROM accounts`).Scan(&total)
	fmt.Println("points granted:", total)
	// Output:
	// ran 3 <nil>
	// already_done 3 <nil>
	// points granted: 30
}
