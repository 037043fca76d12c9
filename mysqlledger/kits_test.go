package mysqlledger_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemtest"
	"github.com/idemgo/idem/internal/crashcheck"
	"github.com/idemgo/idem/mysqlledger"
)

// TestCrashKit runs the README's "Testing your own job" on the ledger,
// whose leases are on the server's clock (crashcheck.All).
func TestCrashKit(t *testing.T) {
	t.Parallel()
	db := openDB(t)
	crashcheck.All(t, func(t *testing.T) crashcheck.Store { return openLedger(t, db) })
}

// TestOutboxConformance runs idemtest's outbox suite on the ledger.
func TestOutboxConformance(t *testing.T) {
	t.Parallel()
	db := openDB(t)
	idemtest.TestOutbox(t, idemtest.OutboxHarness[*sql.Tx]{Open: func(t *testing.T) idem.TxStore[*sql.Tx] { return openLedger(t, db) }})
}

// TestLimits runs package limit's suite on the ledger.
func TestLimits(t *testing.T) {
	t.Parallel()
	db := openDB(t)
	idemtest.TestLimits(t, func(t *testing.T) idem.Store { return openLedger(t, db) })
}

// TestSharedLimits runs package limit's limits in three processes on one
// ledger.
func TestSharedLimits(t *testing.T) {
	idemtest.TestSharedLimits(t, idemtest.LimitHarness{
		New: func(t *testing.T) string {
			if idemtest.IsChild(t) {
				return "" // the child is told where by its parent
			}
			return openLedger(t, openDB(t)).Prefix()
		},
		Open: func(t *testing.T, prefix string) idem.Store {
			l, err := mysqlledger.New(context.Background(), openDB(t), mysqlledger.WithTablePrefix(prefix))
			if err != nil {
				t.Fatal(err)
			}
			return l
		},
	})
}

// killHarness is the kill kits' harness: a ledger with a fresh prefix (the
// argument of Reopen, in the database named by IDEM_TEST_MYSQL_DSN, which
// a child inherits) and the table granted for EachTx's business writes.
func killHarness() idemtest.KillHarness[*sql.Tx] {
	ledger := func(s idem.TxStore[*sql.Tx]) *mysqlledger.Ledger { return s.(*mysqlledger.Ledger) }
	return idemtest.KillHarness[*sql.Tx]{
		SetUntilSeal: true, // a turn keeps the set it records in memory until its Seal
		Open: func(t *testing.T) (idem.TxStore[*sql.Tx], string) {
			l := openLedger(t, openDB(t))
			if _, err := l.DB().Exec(`CREATE TABLE ` + l.Table("granted") + ` (item VARBINARY(255) NOT NULL PRIMARY KEY, n INT NOT NULL)`); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { l.DB().Exec(`DROP TABLE IF EXISTS ` + l.Table("granted")) })
			return l, l.Prefix()
		},
		Reopen: func(ctx context.Context, prefix string) (idem.TxStore[*sql.Tx], func(), error) {
			l, closeDB, err := reopen(ctx, prefix)
			if err != nil {
				return nil, nil, err
			}
			return l, closeDB, nil
		},
		Apply: func(ctx context.Context, s idem.TxStore[*sql.Tx], tx *sql.Tx, item string) error {
			_, err := tx.ExecContext(ctx, `INSERT INTO `+ledger(s).Table("granted")+` (item, n) VALUES (?, 1) ON DUPLICATE KEY UPDATE n = n + 1`, item)
			return err
		},
		Applied: func(t *testing.T, s idem.TxStore[*sql.Tx]) map[string]int {
			return queryCounts(t, ledger(s).DB(), `SELECT item, n FROM `+ledger(s).Table("granted"))
		},
		ItemStatus: func(ctx context.Context, s idem.TxStore[*sql.Tx], key idem.Key, item string) (string, error) {
			var status string
			err := ledger(s).DB().QueryRowContext(ctx, `SELECT status FROM `+ledger(s).Table("item_state")+` WHERE job = ? AND period = ? AND item = ?`,
				key.Job, key.Period, item).Scan(&status)
			return status, err
		},
		NotDone: func(t *testing.T, s idem.TxStore[*sql.Tx], _ idem.Key) string { return notDone(ledger(s)) },
		ItemDetail: func(ctx context.Context, s idem.TxStore[*sql.Tx], key idem.Key, item string) string {
			return itemDetail(ctx, ledger(s), key, item)
		},
		// No Shift: the outbox's leases are on the relay's clock, which
		// the kit moves instead.
	}
}

// itemDetail says where key's chunks have item (chunk, position, and the
// chunk's row) and the item's own record, for a failure's message.
func itemDetail(ctx context.Context, l *mysqlledger.Ledger, key idem.Key, item string) string {
	rows, err := l.DB().QueryContext(ctx, `SELECT c.chunk, c.n, c.settled, c.started, c.doubt, c.status, c.attempt, c.failures, li.items
		FROM `+l.Table("item_chunks")+` c JOIN `+l.Table("item_lists")+` li ON li.job = c.job AND li.period = c.period AND li.chunk = c.chunk
		WHERE c.job = ? AND c.period = ? ORDER BY c.chunk`, key.Job, key.Period)
	if err != nil {
		return "chunks: " + err.Error()
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var chunk, n, settled, started, doubt, attempt, failures int64
		var status, items string
		if err := rows.Scan(&chunk, &n, &settled, &started, &doubt, &status, &attempt, &failures, &items); err != nil {
			return "chunks: " + err.Error()
		}
		for pos, it := range strings.Split(items, "\n") {
			if it == item {
				out = append(out, fmt.Sprintf("chunk %d position %d of %d (settled %d, started %d, doubt %d, %s, attempt %d, failures %d)",
					chunk, pos, n, settled, started, doubt, status, attempt, failures))
			}
		}
	}
	if err := rows.Err(); err != nil {
		return "chunks: " + err.Error()
	}
	if len(out) == 0 {
		out = append(out, "in no chunk's list")
	}
	var status, lastErr string
	var attempt, failures int64
	switch err := l.DB().QueryRowContext(ctx, `SELECT status, attempt, failures, last_error FROM `+l.Table("item_state")+`
		WHERE job = ? AND period = ? AND item = ?`, key.Job, key.Period, item).Scan(&status, &attempt, &failures, &lastErr); {
	case errors.Is(err, sql.ErrNoRows):
		out = append(out, "no record of its own")
	case err != nil:
		out = append(out, "its record: "+err.Error())
	default:
		out = append(out, fmt.Sprintf("its record: %s, attempt %d, failures %d, %q", status, attempt, failures, lastErr))
	}
	return strings.Join(out, "; ")
}

// notDone describes the items that are not done, for a failure's message.
func notDone(l *mysqlledger.Ledger) string {
	rows, err := l.DB().Query(`SELECT status, count(*), min(item), '' FROM ` + l.Table("item_state") + ` WHERE status <> 'done' GROUP BY status
		UNION ALL SELECT CONCAT('chunk ', status), SUM(n - settled), MIN(chunk), '' FROM ` + l.Table("item_chunks") + ` WHERE status <> 'done' GROUP BY status`)
	if err != nil {
		return err.Error()
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var status, item, e string
		var n int
		if err := rows.Scan(&status, &n, &item, &e); err != nil {
			return err.Error()
		}
		out = append(out, fmt.Sprintf("%d %s (first %s)", n, status, item))
	}
	return strings.Join(out, "; ")
}

// TestEachRandomKills is idemtest's random-kill kit: Each and EachTx
// SIGKILLed while generating the item set, then at random moments, in
// every mode; no item applied twice by EachTx, none lost.
func TestEachRandomKills(t *testing.T) {
	testDSN(t)
	if testing.Short() {
		t.Skip("3000 items, 13 kills per mode")
	}
	idemtest.TestEachRandomKills(t, killHarness())
}

// TestOutboxRelayKilledMidDelivery: a relay process is SIGKILLed while the
// receiver holds one of its webhook requests; after the restart every
// message arrives, each topic in order.
func TestOutboxRelayKilledMidDelivery(t *testing.T) {
	testDSN(t)
	idemtest.TestRelayKilledMidDelivery(t, killHarness())
}

// TestEachMark: idem.Each's period mark (MarkFresh) with four hosts at
// once, beside a holder of the period, and stopped before it writes.
func TestEachMark(t *testing.T) {
	t.Parallel()
	idemtest.TestEachMark(t, func(t *testing.T, n int) []idem.Store {
		first := openLedger(t, openDB(t))
		hosts := []idem.Store{first}
		for len(hosts) < n {
			l, err := mysqlledger.New(context.Background(), openDB(t), mysqlledger.WithTablePrefix(first.Prefix()))
			if err != nil {
				t.Fatal(err)
			}
			hosts = append(hosts, l)
		}
		return hosts
	})
}
