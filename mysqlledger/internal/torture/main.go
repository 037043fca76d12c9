// Command torture is the kill -9 torture test of idem's Run protocol
// (github.com/idemgo/idem/internal/torture) with one more store: the MySQL
// ledger, whose workers each open a *sql.DB of their own (separate "hosts",
// as far as the server can tell) on tables with a fresh prefix in the
// database that -mysql-dsn or $IDEM_TEST_MYSQL_DSN names.
//
//	cd mysqlledger && go run ./internal/torture -store mysql -mode tx -kills 300 -keys 2000
//
// Every flag, the report and its last line,
//
//	torture: store=mysql mode=M kills=N keys=K effects=E duplicates=D lost=L unknown=U violations=V
//
// and the exit status are those of the root module's command; its stores
// (sqlite, statefile) work here too. In -mode tx the effect is a row
// written through RunTx's *sql.Tx; in -mode outbox, a row and a message of
// the ledger's outbox. To crash the server during a run as well, against a
// server of scripts/mysql.sh:
//
//	go run ./internal/torture -store mysql -mode tx -kills 300 -keys 2000 &
//	sleep 3; ../scripts/mysql.sh crash; sleep 3; ../scripts/mysql.sh crash; wait
//
// (SIGKILL of mariadbd and a restart that recovers from its redo log; a
// worker that opens its ledger meanwhile waits for the server.)
// TestTortureMySQLServerCrash does that on a server of its own. The run's
// tables are dropped at the end, unless the run's directory is kept
// (-keep, -dir, violations or errors): then the report names their prefix.
package main

import (
	"os"

	"github.com/idemgo/idem/internal/torture/harness"
)

func main() {
	harness.Register(mysqlBackend())
	if harness.IsWorker() {
		os.Exit(harness.RunWorker())
	}
	os.Exit(harness.Main(os.Args[1:], os.Stdout, os.Stderr))
}
