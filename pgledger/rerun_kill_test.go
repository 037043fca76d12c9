package pgledger_test

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemtest"
	"github.com/idemgo/idem/pgledger"
	"github.com/jackc/pgx/v5"
)

// TestRerunDependentsKills is idemtest's kill kit of a re-run with its
// dependents (a RunTx settlement, a mail job with an outbox, a monthly
// report) on the Postgres ledger, its runners SIGKILLed at random moments.
func TestRerunDependentsKills(t *testing.T) {
	testDSN(t)
	kh := pgKillHarness()
	idemtest.TestRerunDependentsKills(t, idemtest.RerunKillHarness[pgx.Tx]{
		KillHarness: idemtest.KillHarness[pgx.Tx]{Open: kh.Open, Reopen: kh.Reopen},
		Table:       func(s idem.Store, name string) string { return table(s.(*pgledger.Ledger), name) },
		Exec: func(ctx context.Context, tx pgx.Tx, query string, args ...any) error {
			_, err := tx.Exec(ctx, dollars(query), args...)
			return err
		},
		QueryRow: func(ctx context.Context, tx pgx.Tx, query string, args []any, dest ...any) error {
			return tx.QueryRow(ctx, dollars(query), args...).Scan(dest...)
		},
	})
}

// dollars numbers the placeholders ? of query as Postgres's $1, $2, ...
func dollars(query string) string {
	var b strings.Builder
	n := 0
	for _, r := range query {
		if r == '?' {
			n++
			b.WriteString("$" + strconv.Itoa(n))
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}
