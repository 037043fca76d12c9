package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/cmd/idem/internal/spec"
	"github.com/idemgo/idem/idemstore"
	"github.com/idemgo/idem/internal/capture"
	"github.com/spf13/cobra"
)

const runLong = `Run COMMAND once for every business period that is due and not done yet.

Put 'idem run' in front of the command in your crontab, systemd service or
Kubernetes CronJob. However often it is triggered (a duplicate cron line, a
timer catching up, a re-created Pod, a manual re-run), COMMAND runs once per
period; periods missed while the host was down run in order, oldest first.

A period is due once it has ENDED in --tz: with --schedule daily, a run at
02:00 on 28 October does the period 2026-10-27. COMMAND gets the period in
its environment and must do the work FOR that period, not "for now":

  IDEM_JOB           the --job name
  IDEM_PERIOD        the period's name: 2026-10-27 (daily), 2026-W44 (weekly),
                     2026-10 (monthly), 2026-10-27T05:00Z (hourly and cron:
                     the period's start in UTC)
  IDEM_PERIOD_START  the period's first instant, RFC 3339 in --tz
  IDEM_PERIOD_END    the instant the period ends (exclusive), RFC 3339 in --tz
  IDEM_ATTEMPT       the attempt number; higher for every new attempt
  IDEM_REQUEST_ID    an id that is the same for every attempt of the period:
                     hand it to APIs that take an idempotency key

The rest of idem's environment is COMMAND's too: a TRACEPARENT (and
TRACESTATE) set for idem, by a traced caller, reaches COMMAND unchanged, so
its spans join the caller's trace. idem itself starts no span.

COMMAND's stdin, stdout and stderr are idem's. SIGTERM and SIGINT are
forwarded to it; idem then records how it ended and starts nothing new.

COMMAND's exit status:
  0    success: the period is done and never runs again
  75   (EX_TEMPFAIL) nothing happened, safe to retry: retried in both modes
  else failure: retried after a backoff (1s, 2s, 4s... at most 10m), up to
       --max-attempts attempts in all (16: at least 33 minutes of failing),
       then the period is parked until 'idem reset'. A retry that would start
       more than --retry-within after idem started is left to the next run:
       idem records when it may start and exits 1 ("backing off until T"), so
       a cron process is not blocked by an outage, and the next trigger after
       T retries it. With --mode at-most-once the period becomes unknown
       instead: it may have half-happened, and a person must decide with
       'idem resolve'.

Modes (--mode):
  at-least-once  (default) an attempt that failed or was killed is run again.
                 Use it when running COMMAND twice for a period is harmless
                 (it recomputes and overwrites the period's results).
  at-most-once   COMMAND never runs twice for a period: a failure (other than
                 exit 75) or a kill leaves the period unknown until
                 'idem resolve JOB PERIOD --done|--retry'.

A killed idem (SIGKILL, OOM killer) leaves its period "running". The next
run on the same host takes it over at once: idem can tell that the killed
process is gone. A run that cannot tell (on another host, with --postgres; in
another container; after a reboot) waits until the killed run's lease
(--lease, default 1m) expires, and exits 4 (busy) until then. Then
at-least-once runs it again and at-most-once reports it unknown. On Linux
the new attempt's COMMAND starts only once the killed run's COMMAND, and
the processes it started, have ended: COMMAND gets SIGTERM when its idem
dies, and inherits a lock on the period as file descriptor 3, which it and
its children hold while they run (leave it open).

Catch-up (--catch-up):
  all     run every due period not done yet, oldest first, at most --max per
          call (the rest is left for the next call). A new job starts with
          the latest due period, or at --since. (default)
  latest  run only the newest due period; older missed ones are recorded as
          skipped.
  none    run only the latest due period, never any other: no backfill.
A failing period stops the catch-up; later periods wait for it. A job's
first run records where its catch-up starts (its cursor), so even a failing
first period is retried by later runs, whatever day they run on. Catch-up
never goes back before the cursor: a period there that is not settled (run
with --catch-up none) is left to you ('idem ls' says so).

Dependencies (--after): a period runs only once the periods of other jobs
it depends on are done: --after settle waits for settle's same period;
--after settle/hourly for every hourly period of settle inside it (a day's
23, 24 or 25 hours, in --tz); --after previous for this job's own previous
period. A period that waits is not started and counts no attempt; idem says
what it waits for (and whether that is parked or unknown) and exits 4.

Parameters (--params, --params-from-args): a period's work can depend on
more than its name: a rate table, an account list, the script's arguments.
Give them with --params STRING, or --params-from-args to take COMMAND and
its arguments as they are. Their fingerprint (SHA-256) is stored with the
period at its first run; a later run of the period with other parameters
runs nothing, changes nothing and exits 6, naming both fingerprints. A run
without them is not checked. 'idem show' prints the fingerprint.

Output (--capture N): keep the first N bytes of COMMAND's standard output
(at most 65536) with the period's done mark; a later trigger that finds
the latest due period done prints them again on standard output, so that
every trigger gets the first run's answer (a report's URL, an id). Only a
run that succeeds keeps its output; 'idem show' prints it. The replaying
trigger needs --capture too: without it, a trigger of a done period prints
nothing (the output stays stored).

Exit status of 'idem run':
  0  ran: at least one period ran now, and every due period is settled
  1  failed: COMMAND failed (it is backing off, or parked),
     or idem was stopped by a signal
  2  usage or setup error: bad flags, unknown zone or schedule, COMMAND not
     found, a path that is not a ledger
  3  already done: nothing was due (use --ok-if-done to exit 0 instead)
  4  busy: another run holds a period now (it is running, or was killed on
     another host less than --lease ago)
  5  unknown: a period's outcome is unknown; run 'idem resolve'
  6  params mismatch: a period was first run with other --params; nothing
     was started for it
  7  the store cannot be opened or written: a full disk ("no space left on
     device"), a read-only file system, too many open files, permission
     denied, a failed fsync (the message names the file and the cause);
     what could not be recorded runs again on a later trigger

The ledger is --ledger PATH, else --postgres DSN, else $IDEM_POSTGRES, else
$IDEM_LEDGER, else $XDG_STATE_HOME/idem/ledger.db or
~/.local/state/idem/ledger.db. A SQLite ledger must be on a local disk of the
one host that runs the job ('idem doctor' checks); jobs on several hosts need
--postgres.`

const runExample = `  # crontab: settle yesterday (Shanghai time) at 02:00; runs missed days too
  0 2 * * * idem run --ledger /var/lib/idem/ledger.db --job settle --tz Asia/Shanghai -- /opt/settle.sh

  # an hourly export that must never run twice
  5 * * * * idem run --job export --schedule hourly --tz UTC --mode at-most-once -- /opt/export.sh

  # periods of a cron expression (every 15 minutes), backfilling from 1 October
  idem run --job sync --schedule "*/15 * * * *" --tz Europe/Berlin --since 2026-10-01 -- ./sync.sh`

type runOptions struct {
	job, schedule, tz, catchUp, since string
	max                               int
	okIfDone                          bool
	params                            string
	paramsFromArgs                    bool
	capture                           int
	after                             []string
	rates, atOnce                     []string
	attemptFlags
}

func newRunCmd() *cobra.Command {
	var o runOptions
	cmd := &cobra.Command{
		Use:     "run --job NAME [flags] -- COMMAND [ARGS...]",
		Short:   "Run a command once per due business period (the thing to put in crontab)",
		Long:    runLong,
		Example: runExample,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return usageError(errors.New("no command to run: put it after --, e.g. idem run --job settle -- /opt/settle.sh"))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error { return runRun(cmd, o, args) },
	}
	f := cmd.Flags()
	f.SetInterspersed(false) // everything from COMMAND on is COMMAND's
	f.StringVar(&o.job, "job", "", "the job's name; the ledger keeps its periods under it (required)")
	f.StringVar(&o.schedule, "schedule", "daily", `the business periods: daily, hourly, weekly (ISO weeks), monthly, or a 5-field cron expression such as "30 2 * * *" whose slots start the periods`)
	f.StringVar(&o.tz, "tz", "Local", "the time zone the periods are cut in (IANA name: Asia/Shanghai, America/New_York, UTC); Local is the host's zone, usually UTC in containers")
	f.StringVar(&o.catchUp, "catch-up", "all", "which due periods to run: all (missed ones too, oldest first), latest (only the newest; older ones are recorded as skipped), none (only the latest due period, no backfill)")
	f.IntVar(&o.max, "max", idem.DefaultMaxPeriods, "with --catch-up all: run at most this many periods per call, leaving the rest for the next call (0 = no limit)")
	f.StringVar(&o.since, "since", "", "for a job that has never run: catch up from the period containing this date (2026-10-01, 2026-10-01T02:00 in --tz, or RFC 3339) instead of only the latest due period")
	f.BoolVar(&o.okIfDone, "ok-if-done", false, "exit 0 instead of 3 when nothing was due (for systemd and Kubernetes, which count any non-zero exit as a failure)")
	o.attemptFlags.add(f)
	f.StringVar(&o.params, "params", "", "the parameters of the work (a rate table's version, an account list): a period first run with other params is refused with exit 6")
	f.BoolVar(&o.paramsFromArgs, "params-from-args", false, "take COMMAND and its arguments as the params: a period first run with another command line is refused with exit 6")
	f.StringArrayVar(&o.rates, "rate", nil, "wait for the limit NAME, shared by every process that names it in the ledger, before a period starts: NAME=PER_SECOND[,BURST] starts a second (burst 1 when not given); repeatable. A period whose wait is cut short (SIGTERM) is not started and exits 4")
	f.StringArrayVar(&o.atOnce, "at-once", nil, "hold a place of the limit NAME, shared by every process that names it in the ledger, while a period runs: NAME=MAX at once (a killed holder's place comes back at once on this host, else after --lease); repeatable")
	f.StringArrayVar(&o.after, "after", nil, "run a period only once the same period of this job is done (JOB), or every period of JOB's schedule inside it (JOB/hourly, JOB/daily, JOB/weekly, JOB/monthly, in --tz), or this job's previous period (previous); repeatable. A period that waits is not started and exits 4")
	f.IntVar(&o.capture, "capture", 0, fmt.Sprintf("keep the first N bytes (at most %d) of COMMAND's stdout with the done mark, and print them again when a later trigger finds the latest due period done", idemstore.MaxValue))
	_ = cmd.MarkFlagRequired("job")
	return cmd
}

func runRun(cmd *cobra.Command, o runOptions, argv []string) error {
	stderr := cmd.ErrOrStderr()
	if err := idemstore.ValidateJob(o.job); err != nil {
		return flagError("--job", err)
	}
	if _, err := exec.LookPath(argv[0]); err != nil {
		return usageError(fmt.Errorf("command %q: %w", argv[0], err))
	}
	loc, err := loadZone(o.tz)
	if err != nil {
		return usageError(err)
	}
	sched, err := parseSchedule(o.schedule, loc)
	if err != nil {
		return usageError(err)
	}
	if o.max < 0 {
		return usageError(fmt.Errorf("--max %d: must be 0 (no limit) or more", o.max))
	}
	params, err := runParams(cmd, o, argv)
	if err != nil {
		return err
	}
	if o.capture < 0 || o.capture > idemstore.MaxValue {
		return usageError(fmt.Errorf("--capture %d: must be 0 (keep nothing) to %d bytes", o.capture, idemstore.MaxValue))
	}
	policies, err := runPolicies(cmd, o, loc)
	if err != nil {
		return err
	}
	specs, err := runLimits(o)
	if err != nil {
		return err
	}
	clk, mode, common, attempt, err := o.options(stderr)
	if err != nil {
		return err
	}

	ctx, cancel := context.WithCancelCause(cmd.Context())
	defer cancel(nil)
	sup := &supervisor{argv: argv, stdin: cmd.InOrStdin(), stdout: cmd.OutOrStdout(), stderr: stderr, cancel: cancel, capture: o.capture}
	if o.capture > 0 {
		ctx = capture.With(ctx, &capture.Slot{})
	}
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	go sup.watch(sigs)
	defer func() {
		signal.Stop(sigs)
		close(sigs)
	}()

	l, err := openLedger(ctx, cmd, clk, true)
	if err != nil {
		return err
	}
	defer l.close()
	sup.locks = l.locks
	skip, _ := clk.(*skipClock)
	store, err := detachStore(l.store, skip)
	if err != nil {
		return err
	}
	if lim, err := newLimits(store, o.lease).option(specs); err != nil {
		return usageError(err)
	} else if lim != nil {
		params = append(params, lim)
	}
	rep := reporter{w: stderr, job: o.job, verbose: o.verbose, hint: ledgerHint(cmd), none: o.catchUp == "none"}
	if skip != nil {
		// Whatever ended the period, no attempt holds it now.
		rep.ended = skip.attemptEnded
	}

	var periods []idem.PeriodResult
	var runErr error
	latest := idem.LastPeriod(sched, clk.Now())
	if o.catchUp == "none" {
		p := latest
		var r idem.Result
		opts := append(append([]idem.Option{mode, attempt, idem.ReportTo(&r)}, common...), params...)
		err := idem.RunOn(ctx, store, idem.Key{Job: o.job, Period: p.Name},
			func(ctx context.Context) error { return sup.run(ctx, p) }, opts...)
		pr := idem.PeriodResult{Period: p, Outcome: r.Outcome, Err: err}
		rep.period(pr)
		periods = []idem.PeriodResult{pr}
	} else {
		opts := append(append(append([]idem.Option{mode, attempt, idem.OnPeriod(rep.period)}, common...), policies...), params...)
		res, err := idem.CatchUp(ctx, store, o.job, sched, sup.run, opts...)
		periods, runErr = res.Periods, err
		if err != nil && len(res.Periods) == 0 {
			return usageError(err) // the job's state cannot be read, or its cursor does not fit --schedule
		}
		if res.Deferred > 0 && err == nil {
			fmt.Fprintf(stderr, "idem: %s: %d more due periods left for the next run (--max %d)\n", o.job, res.Deferred, o.max)
		}
	}
	if len(periods) == 0 && o.verbose {
		fmt.Fprintf(stderr, "idem: %s: nothing due (schedule %s)\n", o.job, sched)
	}
	if o.capture > 0 {
		replay(ctx, store, cmd.OutOrStdout(), stderr, idem.Key{Job: o.job, Period: latest.Name}, periods)
	}
	return runExit(periods, runErr, o.okIfDone)
}

// runExit is how idem run exits after periods (exitCode), runErr the error
// of its catch-up, okIfDone --ok-if-done.
func runExit(periods []idem.PeriodResult, runErr error, okIfDone bool) error {
	code := exitCode(periods)
	if runErr != nil && (code == exitOK || code == exitDone) {
		// The periods are fine but the ledger failed afterwards (moving the
		// catch-up cursor): say so.
		return &exitError{code: exitFailed, err: runErr}
	}
	if code == exitDone && okIfDone {
		code = exitOK
	}
	if code != exitOK {
		return &exitError{code: code}
	}
	return nil
}

// runParams are the options of --params and --params-from-args.
func runParams(cmd *cobra.Command, o runOptions, argv []string) ([]idem.Option, error) {
	var params []idem.Option
	switch {
	case o.paramsFromArgs && cmd.Flags().Changed("params"):
		return nil, usageError(errors.New("--params and --params-from-args: give one of them"))
	case o.paramsFromArgs:
		params = append(params, idem.WithParams(argv))
	case cmd.Flags().Changed("params"):
		params = append(params, idem.WithParamsBytes([]byte(o.params)))
	}
	return params, nil
}

// runPolicies are the catch-up options of --catch-up, --max, --after and
// --since.
func runPolicies(cmd *cobra.Command, o runOptions, loc *time.Location) ([]idem.Option, error) {
	var policies []idem.Option
	switch o.catchUp {
	case "all":
		policies = append(policies, idem.CatchUpAll(o.max))
	case "latest", "none":
		if cmd.Flags().Changed("max") {
			return nil, usageError(fmt.Errorf("--max applies to --catch-up all only"))
		}
		if o.catchUp == "latest" {
			policies = append(policies, idem.CatchUpLatest())
		}
	default:
		return nil, usageError(fmt.Errorf("--catch-up %q: use all, latest or none", o.catchUp))
	}
	for _, a := range o.after {
		if o.catchUp == "none" {
			return nil, usageError(fmt.Errorf("--after needs --catch-up all or latest"))
		}
		opt, err := spec.After(a, o.job, loc)
		if err != nil {
			return nil, flagError("--after", err)
		}
		policies = append(policies, opt)
	}
	if o.since != "" {
		if o.catchUp == "none" {
			return nil, usageError(fmt.Errorf("--since needs --catch-up all or latest"))
		}
		t, err := parseTime(o.since, loc)
		if err != nil {
			return nil, flagError("--since", err)
		}
		policies = append(policies, idem.Since(t))
	}
	return policies, nil
}

// runLimits are the shared limits of --rate and --at-once.
func runLimits(o runOptions) ([]spec.Limit, error) {
	var specs []spec.Limit
	for _, v := range o.rates {
		sp, err := spec.ParseRate(v)
		if err != nil {
			return nil, flagError("--rate", err)
		}
		specs = append(specs, sp)
	}
	for _, v := range o.atOnce {
		sp, err := spec.ParseAtOnce(v)
		if err != nil {
			return nil, flagError("--at-once", err)
		}
		specs = append(specs, sp)
	}
	return specs, nil
}

// replay prints, for --capture, the output stored with the done mark of
// key (the latest due period) when this run did not run it now: a later
// trigger gets the first run's answer.
func replay(ctx context.Context, s idem.Store, stdout, stderr io.Writer, key idem.Key, periods []idem.PeriodResult) {
	for _, p := range periods {
		if p.Period.Name == key.Period && p.Outcome == idem.Ran {
			return // its output went to stdout as it ran
		}
	}
	rec, ok, err := s.Lookup(context.WithoutCancel(ctx), key)
	switch {
	case err != nil:
		fmt.Fprintf(stderr, "idem: %s %s: cannot read its stored output: %v\n", key.Job, key.Period, err)
	case ok && rec.Status == idem.StatusDone:
		_, _ = stdout.Write(rec.Value)
	}
}

// exitCode sums up the periods of a run: the most urgent problem wins
// (params mismatch, then unknown, then failed, then busy); otherwise 0 if
// one ran, 3 if none did.
func exitCode(periods []idem.PeriodResult) int {
	rank := func(code int) int {
		return map[int]int{exitDone: 0, exitOK: 1, exitBusy: 2, exitFailed: 3, exitStore: 4, exitUnknown: 5, exitMismatch: 6}[code]
	}
	code := exitDone
	for _, p := range periods {
		c := exitFailed
		switch p.Outcome {
		case idem.Ran, idem.Recovered:
			c = exitOK
		case idem.AlreadyDone, idem.Skipped:
			c = exitDone
		case idem.Unknown:
			c = exitUnknown
		case idem.InProgress, idem.LeaseLost, idem.Waiting, idem.Deferred:
			c = exitBusy
		case idem.ParamsMismatch:
			c = exitMismatch
		}
		if p.Err != nil && (c == exitOK || c == exitDone) {
			c = exitFailed
		}
		if c == exitFailed && storeProblem(p.Err) {
			c = exitStore
		}
		if rank(c) > rank(code) {
			code = c
		}
	}
	return code
}
