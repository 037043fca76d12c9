package main

import (
	"fmt"

	"github.com/idemgo/idem"
	"github.com/spf13/cobra"
)

func newResetCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "reset JOB PERIOD",
		Short: "Un-park a parked period (or cut a backoff short), so the next run retries it",
		Long: `Make a parked period runnable again: the next 'idem run' runs it, with its
failure count cleared. A period is parked after --max-attempts failures;
fix the cause first.

It also works on a failed period that is backing off (retry now), but not
on an unknown one: whether its work happened is a decision, made with
'idem resolve --done' or '--retry'.

Exit status: 0 reset, 1 refused, 2 usage error or no ledger.`,
		Example: `  idem reset report 2026-10-27`,
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
			switch {
			case err != nil:
				return fail(exitFailed, "%w", err)
			case !ok:
				return fail(exitFailed, "%s %s: no record: it has not run, nothing to reset", key.Job, key.Period)
			case rec.Status == idem.StatusUnknown:
				return fail(exitFailed, "%s %s is unknown, not parked: check whether its work happened, then 'idem resolve%s %s %s --done' or '--retry'",
					key.Job, key.Period, ledgerHint(cmd), key.Job, key.Period)
			case rec.Status == idem.StatusDone:
				return fail(exitFailed, "%s %s is done, not parked: to run it again on purpose (to repair data), 'idem rerun%s %s --period %s --reason TEXT'",
					key.Job, key.Period, ledgerHint(cmd), key.Job, key.Period)
			case rec.Status != idem.StatusParked && rec.Status != idem.StatusFailed:
				return fail(exitFailed, "%s %s is %s, not parked: nothing to reset", key.Job, key.Period, rec.Status)
			}
			if err := l.store.Resolve(ctx, key, idem.ResolveRetry); err != nil {
				return fail(exitFailed, "%w", err)
			}
			what := "the next run retries it"
			if n, err := passedAfterRetry(cmd, l.store, key, clk.Now()); err != nil {
				return fail(exitFailed, "%s %s: reset (was %s), but: %w", key.Job, key.Period, rec.Status, err)
			} else if n != "" {
				what = "but " + n
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s %s: reset (was %s); %s\n", key.Job, key.Period, rec.Status, what)
			return nil
		},
	}
	return cmd
}
