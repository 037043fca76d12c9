// Command idem makes a scheduled command idempotent: wrap it in `idem run`
// from cron, a systemd timer or a Kubernetes CronJob, and it runs once per
// business period however often it is triggered, with missed periods caught
// up after downtime. The other subcommands inspect and repair the ledger.
//
//	idem run --ledger /var/lib/idem/ledger.db --job settle --schedule daily --tz Asia/Shanghai -- /opt/settle.sh
//	idem ls --status unknown
//	idem show settle 2026-10-27
//	idem resolve settle 2026-10-27 --done
//	idem doctor /var/lib/idem/ledger.db
//
// See README.md in this directory, or `idem help`.
package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	_ "time/tzdata" // --tz must work on minimal images without /usr/share/zoneinfo

	"github.com/idemgo/idem/mysqlledger"
	"github.com/idemgo/idem/redisstore"
	"github.com/spf13/cobra"
)

func main() {
	os.Exit(execute(os.Args[1:], os.Stdout, os.Stderr))
}

// execute runs the command line args and returns the exit code.
func execute(args []string, stdout, stderr io.Writer) int {
	root := newRoot()
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	err := root.Execute()
	if err == nil {
		return exitOK
	}
	var ee *exitError
	if errors.As(err, &ee) {
		if (ee.code == exitUsage || ee.code == exitFailed) && storeProblem(ee.err) {
			ee.code = exitStore
		}
		if ee.err != nil {
			fmt.Fprintln(stderr, prefixed(ee.err))
		}
		if ee.hint != "" {
			fmt.Fprintln(stderr, ee.hint)
		}
		return ee.code
	}
	// cobra's own errors: unknown command, bad flag, wrong number of args.
	fmt.Fprintln(stderr, prefixed(err))
	fmt.Fprintln(stderr, "Run 'idem help' (or 'idem COMMAND --help') for usage.")
	return exitUsage
}

// prefixed is err's message starting with "idem: " once (the library's
// errors already do).
func prefixed(err error) string {
	msg := err.Error()
	if strings.HasPrefix(msg, "idem: ") {
		return msg
	}
	return "idem: " + msg
}

func newRoot() *cobra.Command {
	root := &cobra.Command{
		Use:   "idem",
		Short: "Run a scheduled command once per business period, however often it is triggered",
		Long: `idem makes a scheduled command idempotent.

cron, systemd timers and Kubernetes CronJobs start a job at least once, not
exactly once: the previous run is still going, a drained node's Pod is
re-created, a timer catches up after downtime, someone re-runs it by hand.
Wrap the command in 'idem run' and it runs once per business period (a day,
an hour, a week, a month, or the slots of a cron expression), with the
periods missed while the host was down run in order afterwards.

idem keeps what ran in a ledger: a SQLite file on a local disk (--ledger, or
$IDEM_LEDGER, or ~/.local/state/idem/ledger.db) or a Postgres database
shared by many hosts (--postgres, or $IDEM_POSTGRES), a MySQL or MariaDB
database (--mysql, or $IDEM_MYSQL), or a Redis server (--redis, or
$IDEM_REDIS).

  idem run --ledger /var/lib/idem/ledger.db --job settle --tz Asia/Shanghai -- /opt/settle.sh

The other commands look at and repair the ledger: ls, show, resolve, reset,
prune, doctor; 'idem ui' serves them as a web page; and 'idem outbox' relays the transactional outbox's
messages to a webhook and lists, retries and drops them.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.PersistentFlags().String("ledger", "", "SQLite ledger file (default $IDEM_LEDGER, else $XDG_STATE_HOME/idem/ledger.db or ~/.local/state/idem/ledger.db)")
	root.PersistentFlags().String("postgres", "", "use the Postgres ledger at this DSN (postgres://user@host/db) instead of a SQLite file (default $IDEM_POSTGRES); leave the password to $PGPASSWORD or ~/.pgpass")
	root.PersistentFlags().String("postgres-schema", "idem", "with --postgres: the schema that holds the ledger's tables (ledgers in different schemas are independent)")
	root.PersistentFlags().Bool("postgres-allow-weak-durability", false, "with --postgres: accept a server that runs with fsync off (a crash of its host can lose done marks and claims: work may run again)")
	root.PersistentFlags().String("redis", "", "use the Redis store on this server (host:port, or redis://[user:password@]host:port/db) instead of a SQLite file (default $IDEM_REDIS); it must run with appendonly yes and appendfsync always")
	root.PersistentFlags().String("redis-prefix", redisstore.DefaultPrefix, "with --redis: the prefix of the store's keys (stores with different prefixes are independent)")
	root.PersistentFlags().Bool("redis-allow-weak-durability", false, "with --redis: accept a server that does not fsync every write before replying (a crash can lose done marks and claims: work may run again)")
	root.PersistentFlags().String("mysql", "", "use the MySQL 8.0+ or MariaDB 10.6+ ledger at this DSN (user:password@tcp(host:port)/db) instead of a SQLite file (default $IDEM_MYSQL); the server must flush every commit (innodb_flush_log_at_trx_commit=1, sync_binlog=1)")
	root.PersistentFlags().String("mysql-prefix", mysqlledger.DefaultPrefix, "with --mysql: the prefix of the ledger's table names (ledgers with different prefixes are independent)")
	root.PersistentFlags().Bool("mysql-allow-weak-durability", false, "with --mysql: accept a server that does not flush every commit to disk (a power failure of its host can lose done marks: work may run again)")
	root.MarkFlagsMutuallyExclusive("ledger", "postgres", "redis", "mysql")
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return &exitError{code: exitUsage, err: err, hint: fmt.Sprintf("Run '%s --help' for usage.", c.CommandPath())}
	})
	root.AddCommand(newRunCmd(), newServeCmd(), newLsCmd(), newShowCmd(), newResolveCmd(), newResetCmd(), newRerunCmd(), newRunNowCmd(), newPruneCmd(), newDoctorCmd(), newOutboxCmd(), newUICmd(), newVersionCmd())
	return root
}
