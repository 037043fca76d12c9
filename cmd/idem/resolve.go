package main

import (
	"fmt"

	"github.com/idemgo/idem"
	"github.com/spf13/cobra"
)

func newResolveCmd() *cobra.Command {
	var done, retry bool
	cmd := &cobra.Command{
		Use:   "resolve JOB PERIOD --done|--retry",
		Short: "Settle a period whose outcome is unknown: it did happen (--done) or it did not (--retry)",
		Long: `Settle a period by hand, after checking what really happened.

A period becomes unknown in --mode at-most-once when the command failed or
idem was killed while it ran: idem cannot tell whether the work happened,
and will not run it again on its own. Look at the command's own records
(its output, the database it writes, the mails it sent), then:

  --done    the work did happen: mark the period done; it never runs again
  --retry   the work did not happen: the next 'idem run' runs it again
            (failure count cleared)

It refuses a period that is done, or that a live run holds.

Exit status: 0 resolved, 1 refused, 2 usage error or no ledger.`,
		Example: `  idem resolve pay 2026-10-27 --done
  idem resolve pay 2026-10-27 --retry`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			key := idem.Key{Job: args[0], Period: args[1]}
			if err := key.Validate(); err != nil {
				return usageError(err)
			}
			to, what := idem.ResolveDone, "done"
			if retry {
				to, what = idem.ResolveRetry, "to be retried by the next run"
			}
			l, clk, err := openForOps(cmd)
			if err != nil {
				return err
			}
			defer l.close()
			if err := l.store.Resolve(cmd.Context(), key, to); err != nil {
				return fail(exitFailed, "%w", err)
			}
			if retry {
				if n, err := passedAfterRetry(cmd, l.store, key, clk.Now()); err != nil {
					return fail(exitFailed, "%s %s: resolved for retry, but: %w", key.Job, key.Period, err)
				} else if n != "" {
					what = "for retry, but " + n
				}
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s %s: resolved, %s\n", key.Job, key.Period, what)
			return nil
		},
	}
	cmd.Flags().BoolVar(&done, "done", false, "the work happened: mark the period done")
	cmd.Flags().BoolVar(&retry, "retry", false, "the work did not happen: let the next run run it")
	cmd.MarkFlagsMutuallyExclusive("done", "retry")
	cmd.MarkFlagsOneRequired("done", "retry")
	return cmd
}
