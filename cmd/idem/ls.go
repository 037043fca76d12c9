package main

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemstore"
	"github.com/spf13/cobra"
)

var statusNames = []string{"running", "failed", "done", "unknown", "parked", "skipped", "pending"}

const lsLong = `List the ledger's records, by job and period (oldest first). --limit N keeps
the last N of them: with --job, the job's N newest periods.

Statuses:
  running  an attempt holds the period (if its lease expired, or its process
           on this host is gone, it died: the next run recovers it)
  failed   the last attempt failed; the next run after its backoff retries
  done     the work is done; the period never runs again
  unknown  an at-most-once attempt may or may not have done its work:
           check, then 'idem resolve JOB PERIOD --done' or '--retry'
  parked   the period failed --max-attempts times: fix the cause, then
           'idem reset JOB PERIOD'
  skipped  settled without running (--catch-up latest)
--status pending lists running and failed together.

'idem run' never goes back before a job's catch-up cursor (the period up
to which it has settled every period in order). A period at or before it
that is not settled (run with --catch-up none, or left by an older idem)
is therefore never retried: its note says "catch-up has passed it". Do its
work by hand if it is not done, then 'idem resolve JOB PERIOD --done'.

Periods pruned with 'idem prune' are no longer listed (they count as done).

A period that waits for other jobs' periods has no record (waiting claims
nothing). With --job and that job's --after (as given to 'idem run', with
its --schedule and --tz), ls adds the job's next period to settle (the one
after its catch-up cursor, else the last that ended) as "waiting" when it
waits, and says for what.

Exit status: 0 listed (perhaps nothing), 2 usage error or no ledger.`

func newLsCmd() *cobra.Command {
	var job, status string
	var asJSON bool
	var limit int
	var w waitFlags
	cmd := &cobra.Command{
		Use:   "ls [--job JOB] [--status STATUS] [--json]",
		Short: "List the periods in the ledger and their status",
		Long:  lsLong,
		Example: `  idem ls --status unknown
  idem ls --job mail --after settle --schedule daily --tz Asia/Shanghai
  idem ls --job settle --json | jq -r '.[] | select(.status == "parked") | .period'`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			f := idem.Filter{Job: job} // --limit keeps the last records, below
			switch status {
			case "", "pending":
			case "running", "failed", "done", "unknown", "parked", "skipped":
				f.Status = idem.Status(status)
			default:
				return usageError(fmt.Errorf("--status %q: use one of %s", status, strings.Join(statusNames, ", ")))
			}
			if limit < 0 {
				return usageError(fmt.Errorf("--limit %d: must be 0 (all) or more", limit))
			}
			if job != "" {
				if err := idemstore.ValidateJob(job); err != nil {
					return flagError("--job", err)
				}
			}
			if len(w.after) > 0 && job == "" {
				return usageError(errors.New("--after is a job's: give its --job"))
			}
			deps, err := w.parse(job)
			if err != nil {
				return err
			}
			l, clk, err := openForOps(cmd)
			if err != nil {
				return err
			}
			defer l.close()
			lst, ok := l.store.(idemstore.Lister)
			if !ok {
				return usageError(fmt.Errorf("%s cannot list its records (it does not implement idemstore.Lister)", l.desc))
			}
			recs, err := lst.List(cmd.Context(), f)
			if err != nil {
				return fail(exitFailed, "%w", err)
			}
			var waiting *idem.Record // the job's next period, when it waits
			var waitsFor string
			if deps != nil && (status == "" || status == "pending") {
				if waiting, waitsFor, err = deps.next(cmd.Context(), l.store, job, clk.Now()); err != nil {
					return fail(exitFailed, "%w", err)
				}
			}
			if status == "pending" {
				kept := recs[:0]
				for _, r := range recs {
					if r.Status == idem.StatusRunning || r.Status == idem.StatusFailed {
						kept = append(kept, r)
					}
				}
				recs = kept
			}
			if limit > 0 && len(recs) > limit {
				recs = recs[len(recs)-limit:] // the newest: the store lists oldest first
			}
			out := cmd.OutOrStdout()
			if asJSON {
				return lsJSON(out, job, recs, waiting, waitsFor)
			}
			if waiting != nil && waiting.Status == "" {
				recs = append(recs, *waiting) // shown as waiting below
			}
			if len(recs) == 0 {
				fmt.Fprintln(cmd.ErrOrStderr(), "no records match")
				return nil
			}
			hint := ledgerHint(cmd)
			cursors, err := jobCursors(cmd.Context(), l.store, recs)
			if err != nil {
				return fail(exitFailed, "%w", err)
			}
			tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "JOB\tPERIOD\tSTATUS\tATTEMPT\tFAILURES\tUPDATED\tNOTE")
			for _, r := range recs {
				st, n := string(r.Status), note(r, cursors[r.Key.Job], clk.Now(), hint)
				if waiting != nil && r.Key == waiting.Key {
					st, n = "waiting", "waits for "+waitsFor
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%s\t%s\n", r.Key.Job, r.Key.Period, st, r.Attempt, r.Failures,
					fmtTime(r.Updated), truncate(n, 100))
			}
			return tw.Flush()
		},
	}
	cmd.Flags().StringVar(&job, "job", "", "only this job")
	cmd.Flags().StringVar(&status, "status", "", "only this status: "+strings.Join(statusNames, ", "))
	cmd.Flags().IntVar(&limit, "limit", 0, "only the last N records of the listing, the newest periods (0 = all)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print a JSON array, for scripts")
	w.add(cmd)
	return cmd
}

// lsJSON prints recs as ls --json does, with waiting (when not nil) the
// job's next period, waiting for waitsFor.
func lsJSON(out io.Writer, job string, recs []idem.Record, waiting *idem.Record, waitsFor string) error {
	list := make([]recordJSON, 0, len(recs)+1)
	for _, r := range recs {
		j := toJSON(r)
		if waiting != nil && r.Key == waiting.Key {
			j.Status, j.WaitsFor = "waiting", waitsFor
		}
		list = append(list, j)
	}
	if waiting != nil && waiting.Status == "" {
		list = append(list, recordJSON{Job: job, Period: waiting.Key.Period, Status: "waiting", WaitsFor: waitsFor, RequestID: waiting.Key.RequestID()})
	}
	return writeJSON(out, list)
}
