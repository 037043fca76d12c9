package pgledger_test

import (
	"context"
	"testing"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemtest"
	"github.com/idemgo/idem/pgledger/internal/pgtest"
)

// The helpers this package's tests share with pgledger/compattest, in
// package pgtest, under the names the tests use.
const dsnEnv = pgtest.DSNEnv

var (
	testDSN         = pgtest.DSN
	newPool         = pgtest.NewPool
	uniqueName      = pgtest.UniqueName
	dropSchemaLater = pgtest.DropSchemaLater
	openLedger      = pgtest.OpenLedger
	openDB          = pgtest.OpenDB
	openDBLedger    = pgtest.OpenDBLedger
	execIn          = pgtest.ExecIn
	queryIn         = pgtest.QueryIn
	shift           = pgtest.Shift
	kitShift        = pgtest.KitShift
	table           = pgtest.Table
	harness         = pgtest.Harness
	dbHarness       = pgtest.DBHarness
)

type (
	schemaLedger    = pgtest.SchemaLedger
	txLedger[T any] = pgtest.TxLedger[T]
)

// sqlDrivers are the database/sql drivers the DBLedger is tested with
// here: pgx's stdlib. pgledger/compattest runs the tests of the other
// drivers and libraries (lib/pq, sqlx, GORM), which this module does not
// require.
var sqlDrivers = []string{"pgx"}

// eachDriver runs test as a parallel subtest for each of sqlDrivers.
func eachDriver(t *testing.T, test func(t *testing.T, driver string)) {
	pgtest.EachDriver(t, sqlDrivers, test)
}

// runTxConcurrently is pgtest.RunTxConcurrently.
func runTxConcurrently[L txLedger[T], T any](t *testing.T, ls []L, key idem.Key, fn func(ctx context.Context, l L, tx T) error) map[idem.Outcome]int {
	t.Helper()
	return pgtest.RunTxConcurrently(t, ls, key, fn)
}

// modelTxFor is pgtest.ModelTxFor.
func modelTxFor[L txLedger[T], T any](exec func(ctx context.Context, tx T, q string, args ...any) error) *idemtest.TxHarness {
	return pgtest.ModelTxFor[L](exec)
}
