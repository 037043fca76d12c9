package main

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/idemgo/idem"
	"github.com/spf13/cobra"
	_ "modernc.org/sqlite" // the "sqlite" driver, the one idem's Ledger uses
)

// Finding levels.
const (
	levelOK    = "ok"
	levelWarn  = "warn"
	levelError = "error"
)

// finding is one line of the doctor's report: what it found, and what to do.
type finding struct {
	Level   string `json:"level"`
	Check   string `json:"check"`
	Message string `json:"message"`
}

type doctorReport struct {
	Path     string    `json:"path"`
	OK       bool      `json:"ok"` // no finding is an error
	Findings []finding `json:"findings"`

	full bool // the ledger's file system is full (checkSpace)
}

func (r *doctorReport) add(level, check, format string, args ...any) {
	r.Findings = append(r.Findings, finding{Level: level, Check: check, Message: fmt.Sprintf(format, args...)})
}

func newDoctorCmd() *cobra.Command {
	var asJSON bool
	var outboxMaxAge time.Duration
	cmd := &cobra.Command{
		Use:   "doctor [PATH]",
		Short: "Check a ledger (SQLite file or --postgres): filesystem, journal, search_path, schema, periods needing a person",
		Long: `Check a SQLite ledger file, or with --postgres DSN (or $IDEM_POSTGRES) a
Postgres ledger, and say what to do about each problem.

  file        the file exists and is a SQLite database
  filesystem  it is on a local filesystem: SQLite's locks and WAL shared
              memory do not work on NFS, CIFS/SMB, FUSE (sshfs, s3fs,
              gcsfuse) or 9p, and two hosts using one ledger there can run a
              period twice or corrupt it
  directory   the directory is writable (SQLite creates -wal and -shm files
              beside the ledger)
  sqlite      the SQLite version, and an integrity check (PRAGMA quick_check)
  journal     the journal mode is wal
  schema      the idem schema version (table idem_meta) is one this idem
              knows
  keys        periods pending (running or failed: idem retries them),
              unknown (need 'idem resolve') and parked (need 'idem reset'),
              and those catch-up has passed (at or before their job's
              catch-up cursor, not settled: no run retries them)
  outbox      messages pending (how many, and how long ago the oldest was
              queued: a warning past --outbox-max-age, default 1h, as a
              relay that does not run or a receiver that keeps failing
              leaves them) and parked (need 'idem outbox retry' or drop)

The ledger is opened read-only and never created: doctor changes nothing.
PATH defaults to --ledger, $IDEM_LEDGER, or the default ledger path.

With --postgres DSN (--postgres-schema names the schema, default idem),
in a read-only session:

  connection   the server answers, its version, the role
  durability   the server runs with fsync on (idem refuses it otherwise,
               unless --postgres-allow-weak-durability: then a warning),
               and full_page_writes on (off is a warning: safe only on a
               file system that never tears a page, such as ZFS); a
               synchronous_commit off by default is reported, and is no
               problem once the schema has version 7 (the ledger's
               commits raise it to on)
  search_path  the ledger's schema is not on the role's search_path (a
               role named like the schema, "idem", with PostgreSQL's
               default search_path "$user", public, has it there: the
               application's unqualified CREATE TABLE and SELECT would go
               into the ledger's schema; idem refuses such a connection)
  schema       the ledger's schema exists, with a version this idem knows
  keys         periods pending, unknown and parked, as above
  outbox       messages pending and parked, as above

With --mysql DSN (--mysql-prefix names the tables' prefix, default idem_),
reading only:

  connection   the server answers, its version, the user, a database
               selected
  durability   innodb_flush_log_at_trx_commit is 1, and sync_binlog is 1
               when the binary log is on (idem refuses the server
               otherwise, unless --mysql-allow-weak-durability: then a
               warning)
  schema       the ledger's tables exist, with a version this idem knows
  keys         periods pending, unknown and parked, as above
  (the outbox is not checked)

Exit status: 0 if no finding is an error (warnings, such as unknown or
parked periods, still exit 0), 1 if one is, 2 usage error.`,
		Example: `  idem doctor /var/lib/idem/ledger.db
  idem doctor --postgres postgres://app@db/app
  idem doctor --mysql 'app:secret@tcp(db:3306)/app'
  idem doctor --json /var/lib/idem/ledger.db | jq -r '.findings[] | select(.level != "ok") | .message'`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			path, dsn, my := "", "", ""
			if len(args) == 1 {
				path = args[0]
			} else {
				t, err := ledgerTarget(cmd)
				if err != nil {
					return err
				}
				if t.redis != "" {
					return usageError(errors.New("doctor checks SQLite and Postgres ledgers, not the Redis store"))
				}
				path, dsn, my = t.path, t.dsn, t.mysql
			}
			if outboxMaxAge <= 0 {
				return flagError("--outbox-max-age", fmt.Errorf("%v: must be positive", outboxMaxAge))
			}
			clk, err := clock()
			if err != nil {
				return err
			}
			var rep *doctorReport
			switch {
			case my != "":
				prefix, _ := cmd.Flags().GetString("mysql-prefix")
				weak, _ := cmd.Flags().GetBool("mysql-allow-weak-durability")
				rep = diagnoseMySQL(cmd.Context(), my, prefix, weak)
			case dsn != "":
				schema, _ := cmd.Flags().GetString("postgres-schema")
				weak, _ := cmd.Flags().GetBool("postgres-allow-weak-durability")
				rep = diagnosePostgres(cmd.Context(), dsn, schema, weak, clk.Now(), outboxMaxAge)
			default:
				rep = diagnose(cmd.Context(), path, clk.Now(), outboxMaxAge)
			}
			out := cmd.OutOrStdout()
			if asJSON {
				if err := writeJSON(out, rep); err != nil {
					return err
				}
			} else {
				tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
				for _, f := range rep.Findings {
					fmt.Fprintf(tw, "%s\t%s\t%s\n", f.Level, f.Check, f.Message)
				}
				if err := tw.Flush(); err != nil {
					return err
				}
			}
			if !rep.OK {
				return &exitError{code: exitFailed}
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the findings as a JSON object, for scripts and monitoring")
	cmd.Flags().DurationVar(&outboxMaxAge, "outbox-max-age", DefaultOutboxMaxAge, "warn when the oldest pending outbox message was queued longer ago than this")
	return cmd
}

// diagnose checks the ledger at path without writing to it, as of now;
// outboxMaxAge is --outbox-max-age.
func diagnose(ctx context.Context, path string, now time.Time, outboxMaxAge time.Duration) *doctorReport {
	rep := &doctorReport{Path: path}
	defer func() {
		rep.OK = true
		for _, f := range rep.Findings {
			if f.Level == levelError {
				rep.OK = false
			}
		}
	}()
	abs, err := filepath.Abs(path)
	if err != nil {
		rep.add(levelError, "file", "%s: %v", path, err)
		return rep
	}
	rep.Path = abs
	dir := filepath.Dir(abs)

	fi, statErr := checkFile(rep, abs)
	if di, err := os.Stat(dir); err != nil || !di.IsDir() {
		rep.add(levelWarn, "directory", "%s does not exist or is not a directory ('idem run' creates a missing one)", dir)
		return rep
	}
	checkFilesystem(rep, dir)
	checkWritable(rep, dir)
	if statErr != nil || !fi.Mode().IsRegular() {
		return rep
	}

	if !checkHeader(rep, abs, fi) {
		return rep
	}

	u := url.URL{Scheme: "file", Path: abs}
	db, err := sql.Open("sqlite", "file:"+u.EscapedPath()+"?mode=ro&_pragma=busy_timeout(5000)")
	if err != nil {
		rep.add(levelError, "sqlite", "cannot open %s: %v", abs, err)
		return rep
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()

	if !checkSQLite(ctx, rep, db, abs) || !checkSchema(ctx, rep, db, abs) {
		return rep
	}
	checkKeys(ctx, rep, db, now, " --ledger "+shellQuote(abs))
	switch b, ok, err := sqliteOutboxBacklog(ctx, db); {
	case err != nil:
		rep.add(levelError, "outbox", "cannot read idem_outbox: %v", err)
	case ok:
		rep.checkOutbox(b, now, outboxMaxAge, " --ledger "+shellQuote(abs))
	}
	return rep
}

// checkFile looks at the ledger's path, abs: a regular file, or why not.
func checkFile(rep *doctorReport, abs string) (os.FileInfo, error) {
	fi, statErr := os.Stat(abs)
	switch {
	case errors.Is(statErr, os.ErrNotExist):
		rep.add(levelError, "file", "no ledger at %s: nothing has run with it yet, or the path is wrong. Check --ledger / $IDEM_LEDGER; 'idem run' creates it", abs)
	case statErr != nil:
		rep.add(levelError, "file", "%s: %v", abs, statErr)
	case fi.IsDir():
		rep.add(levelError, "file", "%s is a directory: give the ledger file's path, e.g. %s", abs, filepath.Join(abs, "ledger.db"))
	case !fi.Mode().IsRegular():
		kind := "a special file"
		switch m := fi.Mode(); {
		case m&os.ModeNamedPipe != 0:
			kind = "a named pipe (FIFO)"
		case m&os.ModeSocket != 0:
			kind = "a socket"
		case m&os.ModeDevice != 0:
			kind = "a device"
		}
		rep.add(levelError, "file", "%s is %s, not a regular file: give the ledger file's path", abs, kind)
	}
	return fi, statErr
}

// checkHeader reports whether the ledger file abs (fi) can be read and is
// a SQLite database.
func checkHeader(rep *doctorReport, abs string, fi os.FileInfo) bool {
	if fi.Size() == 0 {
		rep.add(levelWarn, "file", "%s is empty: the next 'idem run' initialises it", abs)
		return false
	}
	head := make([]byte, 16)
	f, err := os.Open(abs)
	if err != nil {
		rep.add(levelError, "file", "cannot read %s: %v. Run doctor as the user the jobs run as", abs, err)
		return false
	}
	_, err = io.ReadFull(f, head)
	f.Close()
	if err != nil || !bytes.Equal(head, []byte("SQLite format 3\x00")) {
		rep.add(levelError, "file", "%s is not a SQLite database: idem refuses it and leaves it untouched. Point --ledger at the ledger file (or a new path); do not delete this file before finding out what it is", abs)
		return false
	}
	rep.add(levelOK, "file", "%s (%s)", abs, size(fi.Size()))
	return true
}

// checkSQLite reports whether SQLite can read the ledger abs (db), and
// checks its integrity.
func checkSQLite(ctx context.Context, rep *doctorReport, db *sql.DB, abs string) bool {
	var version string
	if err := db.QueryRowContext(ctx, `SELECT sqlite_version()`).Scan(&version); err != nil {
		if rep.full {
			rep.add(levelError, "sqlite", "cannot read %s: %v: its file system is full, and SQLite needs room for the -shm file even to read. Free space, then rerun doctor", abs, err)
			return false
		}
		rep.add(levelError, "sqlite", "cannot read %s: %v. Check its permissions (and those of its -wal and -shm files), and run doctor as the user the jobs run as", abs, err)
		return false
	}
	var check string
	if err := db.QueryRowContext(ctx, `PRAGMA quick_check`).Scan(&check); err != nil || check != "ok" {
		if err != nil {
			check = err.Error()
		}
		rep.add(levelError, "sqlite", "SQLite %s; integrity check failed: %s. Stop the jobs, copy the file aside, and restore it from a backup (or start a new ledger and resolve the periods by hand)", version, check)
	} else {
		rep.add(levelOK, "sqlite", "SQLite %s; integrity check ok", version)
	}
	return true
}

// checkSchema reports whether the database abs (db) is an idem ledger, and
// checks its journal mode and schema version.
func checkSchema(ctx context.Context, rep *doctorReport, db *sql.DB, abs string) bool {
	var tables int
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_master WHERE type='table' AND name IN ('idem_meta', 'idem_runs')`).Scan(&tables); err != nil {
		rep.add(levelError, "schema", "cannot read the schema: %v", err)
		return false
	}
	if tables < 2 {
		rep.add(levelError, "schema", "%s is a SQLite database but not an idem ledger (no idem_meta/idem_runs tables): point --ledger at the ledger file, or at a new path", abs)
		return false
	}
	var mode string
	if err := db.QueryRowContext(ctx, `PRAGMA journal_mode`).Scan(&mode); err != nil {
		rep.add(levelError, "journal", "cannot read the journal mode: %v", err)
	} else if strings.EqualFold(mode, "wal") {
		rep.add(levelOK, "journal", "journal mode wal")
	} else {
		rep.add(levelWarn, "journal", "journal mode %s, expected wal (idem sets it when it creates a ledger; something changed it): with no job running, run: sqlite3 %s 'PRAGMA journal_mode=WAL'", mode, shellQuote(abs))
	}

	var sv int
	err := db.QueryRowContext(ctx, `SELECT value FROM idem_meta WHERE name='schema_version'`).Scan(&sv)
	switch {
	case err != nil:
		rep.add(levelError, "schema", "no schema version in idem_meta (%v): the ledger was not initialised completely; move it aside and let 'idem run' create a new one", err)
	case sv == idem.SchemaVersion+1:
		rep.add(levelWarn, "schema", "schema version %d, one newer than this idem's %d: the next release wrote it; this idem uses it as it is (as in a rolling update), upgrade it soon", sv, idem.SchemaVersion)
	case sv > idem.SchemaVersion:
		rep.add(levelError, "schema", "schema version %d, newer than this idem knows (%d) by more than one: a newer idem wrote it; upgrade this idem binary (it refuses to touch the ledger)", sv, idem.SchemaVersion)
	case sv < idem.SchemaVersion:
		rep.add(levelWarn, "schema", "schema version %d, older than this idem's %d: the next 'idem run' upgrades it", sv, idem.SchemaVersion)
	default:
		rep.add(levelOK, "schema", "idem schema version %d", sv)
	}
	return true
}

// checkKeys reports the periods that are not settled.
func checkKeys(ctx context.Context, rep *doctorReport, db *sql.DB, now time.Time, hint string) {
	// The periods catch-up has passed: at or before their job's cursor, not
	// settled, not held by a live run. No 'idem run' reaches them again.
	passedSQL := `0`
	var jobsTable int
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_master WHERE type='table' AND name='idem_jobs'`).Scan(&jobsTable); err != nil {
		rep.add(levelError, "keys", "cannot read the schema: %v", err)
		return
	}
	if jobsTable > 0 {
		passedSQL = `(SELECT cursor FROM idem_jobs AS j WHERE j.job = r.job AND j.cursor != '' AND r.period <= j.cursor) IS NOT NULL
			AND (status IN ('failed', 'unknown', 'parked') OR (status = 'running' AND lease_until <= ?1))`
	}
	rows, err := db.QueryContext(ctx, `SELECT status, count(*),
		coalesce(sum(status = 'running' AND lease_until < ?1), 0), coalesce(sum(`+passedSQL+`), 0)
		FROM idem_runs AS r GROUP BY status`, now.UnixMicro())
	if err != nil {
		rep.add(levelError, "keys", "cannot read idem_runs: %v", err)
		return
	}
	defer rows.Close()
	counts, passed := map[string]int{}, map[string]int{}
	expired, total, passedAll := 0, 0, 0
	for rows.Next() {
		var status string
		var n, exp, p int
		if err := rows.Scan(&status, &n, &exp, &p); err != nil {
			rep.add(levelError, "keys", "cannot read idem_runs: %v", err)
			return
		}
		counts[status], passed[status] = n, p
		expired += exp
		total += n
		passedAll += p
	}
	if err := rows.Err(); err != nil {
		rep.add(levelError, "keys", "cannot read idem_runs: %v", err)
		return
	}
	var jobs int
	_ = db.QueryRowContext(ctx, `SELECT count(DISTINCT job) FROM idem_runs`).Scan(&jobs)
	rep.add(levelOK, "keys", "%d records of %d jobs: %d done, %d skipped", total, jobs, counts["done"], counts["skipped"])

	// The counts below are of the periods that 'idem run' still reaches.
	expired -= passed["running"]
	for status, n := range passed {
		counts[status] -= n
	}
	pending := counts["running"] + counts["failed"]
	switch {
	case pending == 0:
		rep.add(levelOK, "keys", "0 pending")
	case expired > 0:
		rep.add(levelOK, "keys", "%d pending (%d running, %d of them with an expired lease: runs that died, recovered by the next run; %d failed, retried by the next run after their backoff): 'idem ls%s --status pending'",
			pending, counts["running"], expired, counts["failed"], hint)
	default:
		rep.add(levelOK, "keys", "%d pending (%d running, %d failed and retried by the next run after their backoff): 'idem ls%s --status pending'",
			pending, counts["running"], counts["failed"], hint)
	}
	rep.needPerson(int64(counts["unknown"]), int64(counts["parked"]), hint)
	if passedAll > 0 {
		rep.add(levelWarn, "keys", "%d not settled at or before their job's catch-up cursor (%d failed, %d unknown, %d parked, %d died running): catch-up has passed them, so no 'idem run' retries them, and reset or resolve --retry does not help (they were run with --catch-up none, or left by an older idem whose catch-up skipped a failed first period). Find them with 'idem ls%s' (note: catch-up has passed it); for each, do its work by hand if it is not done, then 'idem resolve%s JOB PERIOD --done'",
			passedAll, passed["failed"], passed["unknown"], passed["parked"], passed["running"], hint, hint)
	}
}

func size(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d bytes", n)
}

// needPerson adds the findings for the periods that wait for a person:
// unknown ones (idem resolve) and parked ones (idem reset); hint is the
// store flags to repeat in the commands it suggests.
func (rep *doctorReport) needPerson(unknown, parked int64, hint string) {
	if unknown > 0 {
		rep.add(levelWarn, "keys", "%d unknown: an at-most-once run failed or was killed, and idem will not run them again by itself. List them with 'idem ls%s --status unknown', check whether each one's work happened, then 'idem resolve%s JOB PERIOD --done' or '--retry'", unknown, hint, hint)
	} else {
		rep.add(levelOK, "keys", "0 unknown")
	}
	if parked > 0 {
		rep.add(levelWarn, "keys", "%d parked: they failed --max-attempts times. List them with 'idem ls%s --status parked' (see the last error), fix the cause, then 'idem reset%s JOB PERIOD'", parked, hint, hint)
	} else {
		rep.add(levelOK, "keys", "0 parked")
	}
}
