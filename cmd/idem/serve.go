package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/cmd/idem/internal/crontab"
	"github.com/idemgo/idem/idemstore"
	"github.com/spf13/cobra"
)

const serveLong = `Run the jobs of a crontab file in the foreground, each once per period:
a cron daemon for containers whose replicas share one ledger.

Every replica runs 'idem serve' with the same file and the same ledger
(--postgres for several hosts; --ledger for processes on one host); each
slot of each line runs once, on one of them, and the slots missed while
every replica was down run when one comes back, oldest first (at most --max
per job at a time). There is no leader: the ledger's claims decide.

The file:

  # comments and blank lines are ignored
  CRON_TZ=Asia/Shanghai             the zone of the lines after it (default: --tz)
  MIN HOUR DOM MON DOW JOB COMMAND [ARGS...]    a cron line
  @daily JOB COMMAND [ARGS...]                  a cron line (@hourly, @weekly,
                                                @monthly, @yearly too)
  daily+2h JOB COMMAND [ARGS...]                a business line
  daily+2h JOB after:UPSTREAM COMMAND [ARGS...] a line whose periods wait for
                                                UPSTREAM's (after:JOB/hourly,
                                                after:previous: as --after)

A job line has when it runs, the job's name (as for 'idem run --job') and
the command, split into words as a shell would (quotes and backslashes; no
variables, globs or pipes: use sh -c '...' for those).

A cron line's five fields are read as cronie reads them: a day-of-month or
day-of-week field that starts with * (*/2) is unrestricted in the rule "if
both are restricted, either may match", and day of week 7 is Sunday. @reboot
is refused. Each slot starts a period that is due at once: the command for
the slot 02:00 runs at 02:00, with IDEM_PERIOD the slot's start in UTC
(2026-10-27T18:00Z for 02:00 in Shanghai). A wall time that a
daylight-saving change skips runs at the gap's end; one it repeats runs at
its first occurrence.

A business line runs the periods of 'idem run --schedule daily' (or hourly,
weekly, monthly) in the line's zone, each due when it ends, plus the delay
after + (a duration: 2h, 90m, 1d): "daily+2h" runs the day 2026-10-27 at
02:00 on the 28th, with IDEM_PERIOD=2026-10-27, as 'idem run --schedule
daily --tz ZONE' gives it. Use it for a script that does the work of a
business day (settle.sh); a cron line's IDEM_PERIOD is a slot in UTC.

Words after:UPSTREAM between a line's job and its command make its periods
wait for UPSTREAM's, as 'idem run --after' does: after:settle waits for
settle's same period, after:imports/hourly for every hourly period of
imports inside it, after:previous for the job's own previous period. A
period that waits is not started and counts no attempt; it runs as soon as
what it waits for is done here (at the next look when another replica did
it). A cycle, or after:JOB between lines of different schedules, is refused
(--check says so, with the line).

Words rate:NAME=PER_SECOND[,BURST] and at-once:NAME=MAX there make the
line's periods wait for limits shared by every replica that names them in
the ledger, as 'idem run --rate' and '--at-once' do: rate:mail=200,20 lets
200 periods of every line naming mail start a second (20 at once after a
quiet time), at-once:report-db=2 lets two run at once. A period waiting
for a limit has claimed nothing. One name with two meanings (on two
lines) is refused.

A job that has never run (the ledger has nothing of it) starts as --since
says: next (the default) with its first period due after idem serve
started, so a line deployed at 10:00 does not run the slot of 02:00 at
once; latest with its latest due period, at once, as 'idem run' does; a
date with the period that contains it. (A daily+2h line deployed at 10:00
first runs today, tomorrow at 02:00: yesterday was due before it started;
--since latest runs it at once.) A job that has run goes on from
the last period it settled: the periods missed since all run. A job the
ledger has under another schedule (its last settled period is not a
period of the line) is refused: idem serve exits 2 naming the line.

Each command runs as under 'idem run': the same environment (IDEM_JOB,
IDEM_PERIOD, IDEM_PERIOD_START, IDEM_PERIOD_END, IDEM_ATTEMPT,
IDEM_REQUEST_ID), the same --mode, the same meaning of its exit status (0
done, 75 nothing happened, else failed: retried after a backoff, then
parked), the same lock on the period. Its stdout and stderr are idem's; its
stdin is empty. Failures are reported on stderr; with -v, every period,
and also a period another replica holds (the normal case with several
replicas; without -v it is not reported).

SIGTERM or SIGINT stops idem serve: it starts nothing new, forwards the
signal to the commands running, records how they ended, and exits 0.

'idem serve --check FILE' reads the file: exit 0 if it is valid, or 2
with the line number and the reason. With a ledger named (--ledger,
--postgres, $IDEM_POSTGRES, $IDEM_LEDGER) it also exits 2 naming a job the
ledger has under another schedule; a SQLite ledger that does not exist yet
is not created.

Exit status: 0 stopped by a signal, or --check found the file valid; 2 usage
or setup error (bad flags, a bad line in the file, the ledger cannot be
opened).`

const serveExample = `  # a container's entrypoint
  idem serve --crontab /etc/idem/crontab --postgres "$DATABASE_URL"

  # /etc/idem/crontab
  CRON_TZ=Asia/Shanghai
  daily+2h settle /opt/settle.sh
  */15 * * * * sync sh -c 'exec /opt/sync --since "$IDEM_PERIOD_START"'

  # validate it in CI; against the ledger before a deploy
  idem serve --check /etc/idem/crontab
  idem serve --check /etc/idem/crontab --postgres "$DATABASE_URL"`

type serveOptions struct {
	crontab, check, tz, since string
	max                       int
	attemptFlags
}

// serveTestHook is set by this package's tests only: it replaces idem
// serve's clock and is given the Scheduler and a stop that acts as SIGTERM.
var serveTestHook *struct {
	clock   idem.Clock
	started func(s *idem.Scheduler, stop func())
}

func newServeCmd() *cobra.Command {
	var o serveOptions
	cmd := &cobra.Command{
		Use:     "serve --crontab FILE [--ledger PATH | --postgres DSN] [flags]",
		Short:   "Run the jobs of a crontab file in the foreground, each period once across replicas (a container's cron)",
		Long:    serveLong,
		Example: serveExample,
		Args:    cobra.NoArgs,
		RunE:    func(cmd *cobra.Command, _ []string) error { return runServe(cmd, o) },
	}
	f := cmd.Flags()
	f.StringVar(&o.crontab, "crontab", "", "the crontab file to run")
	f.StringVar(&o.check, "check", "", "only check the crontab file: exit 0 if it is valid, 2 with the line and the reason if not")
	f.StringVar(&o.tz, "tz", "Local", "the zone of the lines before any CRON_TZ= line (IANA name; Local is the host's zone, usually UTC in containers)")
	f.IntVar(&o.max, "max", idem.DefaultMaxPeriods, "run at most this many missed periods of a job at a time (0 = no limit)")
	f.StringVar(&o.since, "since", "next", "where a job that has never run starts: next (its first period due after idem serve starts; nothing at once), latest (its latest due period, at once, as 'idem run'), or a date (2026-10-01, 2026-10-01T02:00 in the line's zone, or RFC 3339) to catch up from")
	o.attemptFlags.add(f)
	cmd.MarkFlagsMutuallyExclusive("crontab", "check")
	cmd.MarkFlagsOneRequired("crontab", "check")
	return cmd
}

// jobSince is the Scheduler option of where the job of j starts if it has
// never run, by --since (checked by checkSince): nil for latest (the
// latest due period, as 'idem run'); for next, the first period not due at
// now.
func jobSince(j crontab.Job, since string, now time.Time) (idem.Option, error) {
	switch since {
	case "latest":
		return nil, nil
	case "next":
		p := j.Sched.At(now.Add(-j.Delay)) // due at its end: not due yet
		if j.AtStart {
			p = j.Sched.Next(j.Sched.At(now)) // due at its start
		}
		return idem.Since(p.Start), nil
	}
	t, err := parseTime(since, j.Loc)
	if err != nil {
		return nil, fmt.Errorf("--since: %w", err)
	}
	return idem.Since(t), nil
}

// checkSince checks --since: next, latest or a time.
func checkSince(since string) error {
	if since == "next" || since == "latest" {
		return nil
	}
	if _, err := parseTime(since, time.UTC); err != nil {
		return fmt.Errorf("--since %q: not next, latest or a time: %w", since, err)
	}
	return nil
}

// checkStored refuses a job that the ledger has under another schedule:
// the last period its catch-up settled (its cursor) is not a period of the
// line's schedule. Run, the line would only fail each look ("did the
// schedule change?"). A change of schedule under which that period is
// still one (from "*/5 * * * *" to "* * * * *", from idem run --schedule
// daily to a daily line) is not detected: the job goes on from it.
func checkStored(ctx context.Context, store idemstore.CatchUpStore, desc, path string, jobs []crontab.Job) error {
	for _, j := range jobs {
		js, err := store.Job(ctx, j.Name)
		if err != nil {
			return fmt.Errorf("%s:%d: job %s: cannot read it from the %s: %w", path, j.Line, j.Name, desc, err)
		}
		if js.Cursor == "" {
			continue
		}
		if _, err := j.Sched.Parse(js.Cursor); err != nil {
			return fmt.Errorf("%s:%d: job %s ran with another schedule: the %s has it settled up to %s, which is not a period of %s. "+
				"Give the line a new job name (a new job starts as --since says), or put back the schedule it ran with",
				path, j.Line, j.Name, desc, js.Cursor, j.Sched)
		}
	}
	return nil
}

// storeGiven reports whether the command line or the environment names a
// ledger (--check reads it only then).
func storeGiven(cmd *cobra.Command) bool {
	return cmd.Flags().Changed("ledger") || cmd.Flags().Changed("postgres") || cmd.Flags().Changed("mysql") ||
		os.Getenv(EnvPostgres) != "" || os.Getenv(EnvMySQL) != "" || os.Getenv(idem.EnvLedger) != ""
}

func runServe(cmd *cobra.Command, o serveOptions) error {
	stderr := cmd.ErrOrStderr()
	path, jobs, err := readCrontab(o)
	if err != nil {
		return err
	}
	if err := checkSince(o.since); err != nil {
		return usageError(err)
	}
	if o.check != "" {
		return runCheck(cmd, o, path, jobs)
	}
	if o.max < 0 {
		return usageError(fmt.Errorf("--max %d: must be 0 (no limit) or more", o.max))
	}
	clk, mode, common, attempt, err := o.options(stderr)
	if err != nil {
		return err
	}
	if h := serveTestHook; h != nil && h.clock != nil {
		clk = h.clock
		common = append(common, idem.WithClock(clk))
	}

	// SIGTERM and SIGINT: forwarded to the running commands, and the
	// Scheduler shuts down once they have ended (supervisor.signal).
	stop, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	defer signal.Stop(sigs)

	l, err := openLedger(cmd.Context(), cmd, clk, true)
	if err != nil {
		return err
	}
	defer l.close()
	if err := checkStored(cmd.Context(), l.store, l.desc, path, jobs); err != nil {
		return usageError(err)
	}
	skip, _ := clk.(*skipClock)
	store, err := detachStore(l.store, skip)
	if err != nil {
		return err
	}
	now := clk.Now()

	s := idem.NewScheduler(store, common...)
	lims := newLimits(store, o.lease)
	var sups []*supervisor
	for _, j := range jobs {
		sup := &supervisor{argv: j.Argv, stdin: strings.NewReader(""), stdout: cmd.OutOrStdout(), stderr: stderr, cancel: cancel, locks: l.locks}
		sups = append(sups, sup)
		rep := reporter{w: stderr, job: j.Name, verbose: o.verbose, hint: ledgerHint(cmd), replicas: true}
		if skip != nil {
			rep.ended = skip.attemptEnded
		}
		opts := append(append(j.Due(), j.Deps...), mode, attempt, idem.CatchUpAll(o.max), idem.OnPeriod(rep.period))
		if lim, err := lims.option(j.Limits); err != nil {
			return usageError(fmt.Errorf("%s:%d: %w", path, j.Line, err))
		} else if lim != nil {
			opts = append(opts, lim)
		}
		since, err := jobSince(j, o.since, now)
		if err != nil {
			return usageError(fmt.Errorf("%s:%d: %w", path, j.Line, err))
		}
		if since != nil {
			opts = append(opts, since)
		}
		if err := s.Add(j.Name, j.Sched, sup.run, opts...); err != nil {
			return usageError(fmt.Errorf("%s:%d: %w", path, j.Line, err))
		}
	}
	if h := serveTestHook; h != nil && h.started != nil {
		h.started(s, func() { sigs <- syscall.SIGTERM })
	}
	go func() {
		for {
			select {
			case sig := <-sigs:
				for _, sup := range sups {
					sup.signal(sig)
				}
			case <-stop.Done():
				return
			}
		}
	}()
	go func() {
		<-stop.Done()
		// The commands got the signal: wait for them, record their ends.
		_ = s.Shutdown(context.Background())
	}()
	if o.verbose {
		fmt.Fprintf(stderr, "idem: serving %d jobs from %s\n", len(jobs), path)
	}
	if err := s.Run(context.Background()); !errors.Is(err, idem.ErrSchedulerClosed) {
		return &exitError{code: exitFailed, err: err}
	}
	if o.verbose {
		fmt.Fprintf(stderr, "idem: stopped: %v\n", context.Cause(stop))
	}
	return nil
}

// readCrontab reads the file of --crontab or --check: its path and jobs.
func readCrontab(o serveOptions) (string, []crontab.Job, error) {
	path := o.crontab
	if o.check != "" {
		path = o.check
	}
	defLoc, err := loadZone(o.tz)
	if err != nil {
		return "", nil, usageError(err)
	}
	f, err := os.Open(path)
	if err != nil {
		return "", nil, usageError(fmt.Errorf("crontab: %w", err))
	}
	jobs, err := crontab.Parse(path, f, defLoc, o.check == "")
	f.Close()
	if err != nil {
		return "", nil, usageError(err)
	}
	return path, jobs, nil
}

// runCheck is idem serve --check of the jobs of the file path, read: with
// -v it prints them; it checks their after: words and the ledger's jobs.
func runCheck(cmd *cobra.Command, o serveOptions, path string, jobs []crontab.Job) error {
	if o.verbose {
		for _, j := range jobs {
			fmt.Fprintf(cmd.OutOrStdout(), "%s:%d: %s %s: %s\n", path, j.Line, j.Name, j, strings.Join(j.Argv, " "))
		}
	}
	if err := checkDependencies(path, jobs); err != nil {
		return usageError(err)
	}
	return checkLedger(cmd, path, jobs)
}

// checkLedger is --check's look at the ledger, when one is named
// (storeGiven): a job it has under another schedule is an error
// (checkStored). A SQLite ledger that does not exist yet has no jobs: it
// is not created.
func checkLedger(cmd *cobra.Command, path string, jobs []crontab.Job) error {
	if !storeGiven(cmd) {
		return nil
	}
	if t, err := ledgerTarget(cmd); err != nil {
		return err
	} else if t.path != "" {
		if _, err := os.Stat(t.path); errors.Is(err, os.ErrNotExist) {
			return nil
		}
	}
	clk, err := clock()
	if err != nil {
		return err
	}
	l, err := openLedger(cmd.Context(), cmd, clk, false)
	if err != nil {
		return err
	}
	defer l.close()
	if err := checkStored(cmd.Context(), l.store, l.desc, path, jobs); err != nil {
		return usageError(err)
	}
	return nil
}

// checkDependencies checks the lines' after: words as the Scheduler of
// 'idem serve' will: each line's job added, in order, to a Scheduler over
// a throwaway store, so that a cycle, or after:JOB between lines of
// different schedules, is the same error, with its line.
func checkDependencies(path string, jobs []crontab.Job) error {
	dir, err := os.MkdirTemp("", "idem-check-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	sf, err := idem.OpenStateFile(filepath.Join(dir, "check.json"))
	if err != nil {
		return err
	}
	s := idem.NewScheduler(sf)
	for _, j := range jobs {
		if err := s.Add(j.Name, j.Sched, func(context.Context, idem.Period) error { return nil }, j.Deps...); err != nil {
			return fmt.Errorf("%s:%d: %w", path, j.Line, err)
		}
	}
	return nil
}
