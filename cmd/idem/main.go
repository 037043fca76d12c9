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
	"syscall"
	_ "time/tzdata" // --tz must work on minimal images without /usr/share/zoneinfo

	"github.com/idemgo/idem/idemstore"
	"github.com/idemgo/idem/redisstore"
	"github.com/spf13/cobra"
)

// Exit codes. `idem run` uses all of them; the other commands use 0, 1 and 2.
const (
	exitOK      = 0 // run: at least one period ran and every due period is settled
	exitFailed  = 1 // run: the command failed, is backing off, or is parked; others: the operation was refused or failed
	exitUsage   = 2 // bad flags or arguments, or the ledger cannot be opened
	exitDone    = 3 // run: nothing was due, every period was done already
	exitBusy    = 4 // run: another run holds a period, or a period waits for another job's (--after)
	exitUnknown = 5 // run: a period's outcome is unknown and needs `idem resolve`

	exitMismatch = 6 // run: a period was first run with other --params; nothing was started
	exitStore    = 7 // the store cannot be opened or written: a full disk, a read-only file system, too many open files, a failed fsync
)

// storeProblem reports an error that says the store cannot be opened or
// written (exit 7): a store that refuses writes after a failed fsync, or a
// file system error (full, read-only, out of file descriptors, I/O error,
// permission denied).
func storeProblem(err error) bool {
	if idemstore.IsFatal(err) {
		return true
	}
	for _, errno := range []error{syscall.ENOSPC, syscall.EDQUOT, syscall.EROFS, syscall.EMFILE, syscall.ENFILE, syscall.EIO, syscall.EACCES, syscall.EPERM} {
		if errors.Is(err, errno) {
			return true
		}
	}
	return false
}

// exitError makes the process exit with code, after printing err (if any)
// and then hint (if any) on stderr.
type exitError struct {
	code int
	err  error
	hint string // a line of advice printed after err
}

func (e *exitError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit %d", e.code)
	}
	return e.err.Error()
}

func (e *exitError) Unwrap() error { return e.err }

// fail returns an exitError with a formatted message.
func fail(code int, format string, args ...any) error {
	return &exitError{code: code, err: fmt.Errorf(format, args...)}
}

// usageError marks err as a usage or setup error (exit 2).
func usageError(err error) error { return &exitError{code: exitUsage, err: err} }

// flagError is usageError of err, the error a flag's value gave, as
// "--flag: why": the library's "idem: " prefix is left out of the middle of
// the line (the line starts with it once). err stays matchable.
func flagError(flag string, err error) error { return usageError(&flagValueError{flag, err}) }

type flagValueError struct {
	flag string
	err  error
}

func (e *flagValueError) Error() string {
	return e.flag + ": " + strings.TrimPrefix(e.err.Error(), "idem: ")
}

func (e *flagValueError) Unwrap() error { return e.err }

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
shared by many hosts (--postgres, or $IDEM_POSTGRES), or a Redis server
(--redis, or $IDEM_REDIS).

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
	root.MarkFlagsMutuallyExclusive("ledger", "postgres", "redis")
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return &exitError{code: exitUsage, err: err, hint: fmt.Sprintf("Run '%s --help' for usage.", c.CommandPath())}
	})
	root.AddCommand(newRunCmd(), newServeCmd(), newLsCmd(), newShowCmd(), newResolveCmd(), newResetCmd(), newPruneCmd(), newDoctorCmd(), newOutboxCmd(), newUICmd())
	return root
}
