package mysqlledger_test

import (
	"context"
	"database/sql"
	"os"
	"testing"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemtest"
	"github.com/idemgo/idem/internal/schedtest"
	"github.com/idemgo/idem/mysqlledger"
)

// reopen opens the ledger of the tables of prefix through a *sql.DB of
// its own (another process's, or a replica's), closed by the func it
// returns.
func reopen(ctx context.Context, prefix string) (*mysqlledger.Ledger, func(), error) {
	db, err := sql.Open("mysql", os.Getenv(dsnEnv))
	if err != nil {
		return nil, nil, err
	}
	l, err := mysqlledger.New(ctx, db, mysqlledger.WithTablePrefix(prefix))
	if err != nil {
		db.Close()
		return nil, nil, err
	}
	return l, func() { db.Close() }, nil
}

// openPrefix is reopen as a schedtest.Opener.
func openPrefix(ctx context.Context, prefix string) (idem.Store, func(), error) {
	l, closeDB, err := reopen(ctx, prefix)
	if err != nil {
		return nil, nil, err
	}
	return l, closeDB, nil
}

// newPrefix creates a ledger's tables with a prefix of their own, dropped
// when t ends, and returns the prefix (in the parent only: a child gets
// it in its argument).
func newPrefix(t *testing.T) string {
	if idemtest.IsChild(t) {
		return ""
	}
	return openLedger(t, openDB(t)).Prefix()
}

// TestSchedulerWakeOnReset: three replicas in processes of their own on
// one MySQL ledger with a daily job whose period is parked; a reset from
// another process is run by one of them within seconds (the wake mark,
// idem.SchedulerWakePoll), not at the next day's due time, and exactly
// once.
func TestSchedulerWakeOnReset(t *testing.T) {
	testDSN(t)
	schedtest.WakeProcesses(t, newPrefix(t), openPrefix)
}
