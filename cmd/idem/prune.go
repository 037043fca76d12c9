package main

import (
	"errors"
	"fmt"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/cmd/idem/internal/spec"
	"github.com/idemgo/idem/idemstore"
	"github.com/spf13/cobra"
)

func newPruneCmd() *cobra.Command {
	var job, keep, through, schedule, tz string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "prune --job JOB (--keep DURATION --schedule S --tz ZONE | --through PERIOD)",
		Short: "Delete the records of old, settled periods, without ever letting them run again",
		Long: `Delete the done and skipped records of a job's old periods, to keep the
ledger small. The job remembers how far it was pruned: a pruned period
counts as done forever, so pruning never makes an old period run again.

  --keep DURATION   prune the periods that ENDED more than DURATION ago
                    (90d, 2w, 36h). Needs the job's --schedule and --tz, as
                    given to 'idem run'. If catch-up has not settled that far
                    yet, prunes up to where it has.
  --through PERIOD  prune every period up to and including PERIOD.

It refuses to prune a period that is not settled (running, failed, unknown,
parked: resolve or reset it first), or past the periods catch-up has settled.

Exit status: 0 pruned (perhaps nothing), 1 refused, 2 usage error or no
ledger.`,
		Example: `  # daily, from cron: keep 90 days of history
  30 3 * * * idem prune --job settle --keep 90d --schedule daily --tz Asia/Shanghai
  idem prune --job settle --through 2026-06-30`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := idemstore.ValidateJob(job); err != nil {
				return flagError("--job", err)
			}
			var sched idem.Schedule
			if schedule != "" {
				loc, err := loadZone(tz)
				if err != nil {
					return usageError(err)
				}
				if sched, err = parseSchedule(schedule, loc); err != nil {
					return usageError(err)
				}
			} else if keep != "" {
				return usageError(errors.New("--keep needs the job's --schedule (and --tz), as given to idem run"))
			}
			l, clk, err := openForOps(cmd)
			if err != nil {
				return err
			}
			defer l.close()
			ctx := cmd.Context()
			js, err := l.store.Job(ctx, job)
			if err != nil {
				return fail(exitFailed, "%w", err)
			}
			if sched != nil && js.Cursor != "" {
				if _, err := sched.Parse(js.Cursor); err != nil {
					return usageError(fmt.Errorf("job %s has periods like %q, which are not periods of --schedule %s: is it the job's schedule?", job, js.Cursor, sched))
				}
			}
			if keep != "" {
				d, err := spec.ParseDuration(keep)
				if err != nil {
					return flagError("--keep", err)
				}
				through = idem.LastPeriod(sched, clk.Now().Add(-d)).Name
				if js.Cursor != "" && through > js.Cursor {
					through = js.Cursor // catch-up has not settled further; prune what it has
				}
			} else if sched != nil {
				if _, err := sched.Parse(through); err != nil {
					return flagError("--through", err)
				}
			}
			if err := (idem.Key{Job: job, Period: through}).Validate(); err != nil {
				return flagError("--through", err)
			}
			n, err := l.store.Prune(ctx, job, through)
			if err != nil {
				return fail(exitFailed, "%w", err)
			}
			if asJSON {
				return writeJSON(cmd.OutOrStdout(), pruneJSON{Job: job, Through: through, Deleted: n})
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s: pruned %d records through %s\n", job, n, through)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&job, "job", "", "the job to prune (required)")
	f.StringVar(&keep, "keep", "", "keep the periods that ended less than this long ago (90d, 2w, 36h)")
	f.StringVar(&through, "through", "", "prune the periods up to and including this one")
	f.StringVar(&schedule, "schedule", "", "the job's schedule, as given to idem run (needed by --keep)")
	f.StringVar(&tz, "tz", "Local", "the job's time zone, as given to idem run")
	f.BoolVar(&asJSON, "json", false, "print a JSON object, for scripts")
	_ = cmd.MarkFlagRequired("job")
	cmd.MarkFlagsOneRequired("keep", "through")
	cmd.MarkFlagsMutuallyExclusive("keep", "through")
	return cmd
}

type pruneJSON struct {
	Job     string `json:"job"`
	Through string `json:"through"`
	Deleted int64  `json:"deleted"`
}
