package main

import (
	"fmt"
	"time"

	"github.com/idemgo/idem"
	"github.com/spf13/cobra"
)

func newRunNowCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "run-now JOB PERIOD",
		Short: "Ask the schedulers ('idem serve', Schedulers in services) to run a due period at once",
		Long: `Ask every scheduler that runs JOB ('idem serve', an idem.Scheduler in a
service), in any process or on any host sharing the ledger, to look at JOB
at once rather than at its next due time: they run PERIOD within seconds if
it is due (by the job's schedule) and runnable. It runs nothing itself.

PERIOD must be runnable now: one that never ran, or that failed and may be
retried now. A done period is refused (to run it again on purpose:
'idem rerun'), and so is a parked one ('idem reset', which wakes the
schedulers too), an unknown one ('idem resolve'), one backing off ('idem
reset' cuts the backoff short) and one that runs now.

The store must keep wake marks: the SQLite, Postgres and MySQL ledgers
and the Redis store do (not the state file). Schedulers read them every 2
seconds.

Exit status: 0 asked, 1 refused, 2 usage error or no ledger.`,
		Example: `  idem run-now settle 2026-10-27`,
		Args:    cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			key := idem.Key{Job: args[0], Period: args[1]}
			if err := key.Validate(); err != nil {
				return usageError(err)
			}
			l, clk, err := openForOps(cmd)
			if err != nil {
				return err
			}
			defer l.close()
			ctx := cmd.Context()
			rec, ok, err := l.store.Lookup(ctx, key)
			if err != nil {
				return fail(exitFailed, "%w", err)
			}
			if ok {
				if why := notRunnableNow(rec, clk.Now(), ledgerHint(cmd)); why != "" {
					return fail(exitFailed, "%s %s %s", key.Job, key.Period, why)
				}
			}
			if err := idem.Wake(ctx, l.store, key.Job); err != nil {
				return fail(exitFailed, "%w", err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s %s: asked; the schedulers running %s look at it within %v and run it if it is due\n",
				key.Job, key.Period, key.Job, idem.SchedulerWakePoll)
			return nil
		},
	}
	return cmd
}

// notRunnableNow says why a period with record rec cannot be run now, and
// which command fits; "" if it can.
func notRunnableNow(rec idem.Record, now time.Time, hint string) string {
	k := rec.Key
	switch rec.Status {
	case idem.StatusDone, idem.StatusSkipped:
		return fmt.Sprintf("is %s: to run it again on purpose (to repair data), 'idem rerun%s %s --period %s --reason TEXT'", rec.Status, hint, k.Job, k.Period)
	case idem.StatusParked:
		return fmt.Sprintf("is parked (%s): fix the cause, then 'idem reset%s %s %s' (it wakes the schedulers too)", rec.LastError, hint, k.Job, k.Period)
	case idem.StatusUnknown:
		return fmt.Sprintf("has an unknown outcome (%s): check whether its work happened, then 'idem resolve%s %s %s --done' or '--retry'", rec.LastError, hint, k.Job, k.Period)
	case idem.StatusRunning:
		if now.Before(rec.LeaseUntil) {
			return fmt.Sprintf("runs now (attempt %d of %s, lease until %s)", rec.Attempt, rec.Owner, rec.LeaseUntil.UTC().Format(time.RFC3339))
		}
	case idem.StatusFailed:
		if now.Before(rec.NotBefore) {
			return fmt.Sprintf("is backing off until %s after %d failures: 'idem reset%s %s %s' makes it runnable now (and wakes the schedulers)",
				rec.NotBefore.UTC().Format(time.RFC3339), rec.Failures, hint, k.Job, k.Period)
		}
	}
	return ""
}
