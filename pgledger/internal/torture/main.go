// Command torture is the kill -9 torture test of idem's Run protocol
// (github.com/idemgo/idem/internal/torture) with one more store: the
// Postgres ledger, whose workers each open a pool of their own (separate
// "hosts", as far as the database can tell) on a fresh schema of the
// database that -pg-dsn or $IDEM_TEST_PG_DSN names.
//
//	cd pgledger && go run ./internal/torture -store postgres -mode tx -kills 300 -keys 2000
//
// With -pg-conn sql the workers' ledgers are on a *sql.DB (pgledger.NewDB,
// pgx's stdlib driver; in -mode tx the effect is written through RunTx's
// *sql.Tx) instead of a pgx pool:
//
//	cd pgledger && go run ./internal/torture -store postgres -pg-conn sql -mode tx -kills 300 -keys 2000
//
// Every flag, the report and its last line,
//
//	torture: store=postgres mode=M kills=N keys=K effects=E duplicates=D lost=L unknown=U violations=V
//
// and the exit status are those of the root module's command; its stores
// (sqlite, statefile) work here too. The run's schema is dropped at the end,
// unless the run's directory is kept (-keep, -dir, violations or errors):
// then the report names it.
package main

import (
	"os"

	"github.com/idemgo/idem/internal/torture/harness"
)

func main() {
	harness.Register(postgresBackend())
	if harness.IsWorker() {
		os.Exit(harness.RunWorker())
	}
	os.Exit(harness.Main(os.Args[1:], os.Stdout, os.Stderr))
}
