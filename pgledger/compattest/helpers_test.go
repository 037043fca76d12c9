package compattest_test

import (
	"context"
	"testing"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/pgledger/internal/pgtest"
	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx"
	_ "github.com/lib/pq"              // database/sql driver "postgres"
)

// The helpers this package's tests share with pgledger's, in package
// pgtest, under the names pgledger's tests use.
const dsnEnv = pgtest.DSNEnv

var (
	testDSN      = pgtest.DSN
	newPool      = pgtest.NewPool
	openLedger   = pgtest.OpenLedger
	openDB       = pgtest.OpenDB
	openDBLedger = pgtest.OpenDBLedger
	execIn       = pgtest.ExecIn
	shift        = pgtest.Shift
	table        = pgtest.Table
)

// libpq is lib/pq's database/sql driver, the one pgledger's own tests do
// not have.
const libpq = "postgres"

// sqlDrivers are the database/sql drivers of the sqlx and GORM tests:
// pgx's stdlib and lib/pq, two hosts as far as the database can tell.
var sqlDrivers = []string{"pgx", libpq}

// eachDriver runs test as a parallel subtest for each of sqlDrivers.
func eachDriver(t *testing.T, test func(t *testing.T, driver string)) {
	pgtest.EachDriver(t, sqlDrivers, test)
}

// runTxConcurrently is pgtest.RunTxConcurrently.
func runTxConcurrently[L pgtest.TxLedger[T], T any](t *testing.T, ls []L, key idem.Key, fn func(ctx context.Context, l L, tx T) error) map[idem.Outcome]int {
	t.Helper()
	return pgtest.RunTxConcurrently(t, ls, key, fn)
}
