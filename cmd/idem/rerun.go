package main

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/user"
	"strings"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/cmd/idem/internal/crontab"
	"github.com/idemgo/idem/idemstore"
	"github.com/spf13/cobra"
)

func newRerunCmd() *cobra.Command {
	var from, to, reason, requestID, crontabPath, tz string
	var periods, dependentLines []string
	var withDependents bool
	cmd := &cobra.Command{
		Use:   "rerun JOB (--from P1 --to P2 | --period P ...) --reason TEXT",
		Short: "Run done periods again on purpose (to repair data): each once per request",
		Long: `Ask for done periods of JOB to run again: the flow table was corrected, a
report's bug was fixed. Each period gets a new revision, and its next run
('idem run JOB PERIOD ...', Run or RunTx in a service) runs the job once more
for it, even though it was done. The job sees the revision in
$IDEM_REVISION (Info.Revision) and a new $IDEM_REQUEST_ID, so a downstream
that dedupes by the request id takes the re-run as new work.

The periods are those of JOB that have a record, from --from to --to (both
included, compared as text: the calendar's periods sort so), or those named
with --period. A period that never ran, is parked (idem reset), has an
unknown outcome (idem resolve) or was pruned is refused, and then nothing is
changed. A period running now is re-run after its attempt ends.

The request is idempotent: sent again with the same id (a retrying script),
it re-runs nothing more. The id is --request-id, or by default one derived
from JOB, the periods, the reason and --with-dependents: to run the same
periods again for the same reason, give a new --request-id.

Dependents (--with-dependents): the periods of the jobs downstream are
re-run too, in the same request: each period that has a record and waits,
by an after: dependency, for a period re-run (directly or through another
job). Their re-runs wait, with no attempt counted, until what they wait
for has run its new revision: the mail of a day runs after the day's new
settlement, a monthly report after the month's days. The ledger does not
keep the dependencies: name them as the jobs' runners do, with --crontab
FILE (the file 'idem serve' runs: its lines' jobs, schedules and after:
words) or with --dependent LINE, a crontab line without its command, once
per job ('daily mail after:settle', 'monthly report after:settle/daily'),
as given to 'idem run --schedule S --after A'. The downstream runners must
wait for their upstream too ('idem serve' with those lines, 'idem run
--after'): a runner that does not is not held back.

Exit status: 0 requested, 1 refused, 2 usage error or no ledger.`,
		Example: `  idem rerun settle --from 2026-10-01 --to 2026-10-31 --reason "flow table corrected (INC-4711)"
  idem run settle 2026-10-01 -- ./settle.sh   # runs it once more (or let the scheduler run it)
  idem rerun settle --from 2026-10-01 --to 2026-10-31 --reason "flow table corrected" \
      --with-dependents --crontab /etc/idem/crontab`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			job := args[0]
			if err := idemstore.ValidateJob(job); err != nil {
				return usageError(err)
			}
			if reason == "" {
				return usageError(fmt.Errorf("--reason is required: say why, for the period's history"))
			}
			if (from == "") != (to == "") || (from == "" && len(periods) == 0) || (from != "" && len(periods) > 0) {
				return usageError(fmt.Errorf("name the periods with --from and --to, or with --period"))
			}
			if from > to {
				return usageError(fmt.Errorf("--from %s is after --to %s", from, to))
			}
			deps, err := rerunDependents(withDependents, crontabPath, dependentLines, tz)
			if err != nil {
				return err
			}
			l, clk, err := openForOps(cmd)
			if err != nil {
				return err
			}
			defer l.close()
			ctx := cmd.Context()
			var keys []idem.Key
			if from != "" {
				lst, ok := l.store.(idemstore.Lister)
				if !ok {
					return usageError(fmt.Errorf("%s cannot list its records (it does not implement idemstore.Lister): name the periods with --period", l.desc))
				}
				recs, err := lst.List(ctx, idem.Filter{Job: job})
				if err != nil {
					return fail(exitFailed, "%w", err)
				}
				for _, r := range recs {
					if r.Key.Period >= from && r.Key.Period <= to {
						keys = append(keys, r.Key)
					}
				}
				if len(keys) == 0 {
					return fail(exitFailed, "%s: no period from %s to %s has a record: nothing to re-run", job, from, to)
				}
			} else {
				for _, p := range periods {
					k := idem.Key{Job: job, Period: p}
					if err := k.Validate(); err != nil {
						return usageError(err)
					}
					keys = append(keys, k)
				}
			}
			if requestID == "" {
				requestID = defaultRerunID(keys, reason, withDependents)
			}
			req := idem.RerunRequest{Keys: keys, RequestID: requestID, Reason: reason, By: whoAsks(), Now: clk.Now()}
			var out []idem.RerunOutcome
			if withDependents {
				out, err = idem.RerunWithDependents(ctx, l.store, req, deps...)
				if errors.Is(err, idem.ErrInvalidOption) {
					return usageError(err) // the declarations: a job twice, a cycle
				}
			} else {
				out, err = idem.Rerun(ctx, l.store, req)
			}
			if err != nil {
				return fail(exitFailed, "%w", err)
			}
			counts := map[idem.RerunState]int{}
			for _, o := range out {
				counts[o.State]++
				fmt.Fprintf(cmd.OutOrStdout(), "%s %s: revision %d, %s\n", o.Key.Job, o.Key.Period, o.Revision, o.State)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "request %s: %d periods: %d queued, %d after the running attempt, %d due already, %d seen before\n",
				requestID, len(out), counts[idem.RerunQueued], counts[idem.RerunAfterRun], counts[idem.RerunDue], counts[idem.RerunSeen])
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&from, "from", "", "the first period to re-run")
	f.StringVar(&to, "to", "", "the last period to re-run")
	f.StringArrayVar(&periods, "period", nil, "a period to re-run (repeatable), instead of --from/--to")
	f.StringVar(&reason, "reason", "", "why the periods run again (required; kept in their history)")
	f.StringVar(&requestID, "request-id", "", "the request's id: the same id re-runs once (default: derived from the job, the periods, the reason and --with-dependents)")
	f.BoolVar(&withDependents, "with-dependents", false, "re-run the periods of the jobs downstream too, each after what it waits for (needs --crontab or --dependent)")
	f.StringVar(&crontabPath, "crontab", "", "with --with-dependents: the crontab file of 'idem serve' whose lines declare the jobs and their after: words")
	f.StringArrayVar(&dependentLines, "dependent", nil, "with --with-dependents: a downstream job, as a crontab line without its command ('daily mail after:settle'; repeatable)")
	f.StringVar(&tz, "tz", "Local", "the zone of the --crontab lines before any CRON_TZ= line, and of --dependent lines")
	return cmd
}

// defaultRerunID is the id of a request that names no id: the same
// periods for the same reason are the same request.
func defaultRerunID(keys []idem.Key, reason string, withDependents bool) string {
	h := sha256.New()
	for _, k := range keys {
		fmt.Fprintf(h, "%s\x00%s\x00", k.Job, k.Period)
	}
	h.Write([]byte(reason))
	if withDependents { // another request than the same one without them
		h.Write([]byte("\x00with dependents"))
	}
	return "cli-" + hex.EncodeToString(h.Sum(nil)[:12])
}

// whoAsks names the OS user and host of a request, for the history.
func whoAsks() string {
	name := "?"
	if u, err := user.Current(); err == nil {
		name = u.Username
	}
	host, _ := os.Hostname()
	return name + "@" + host
}

// rerunDependents reads the jobs' declarations of --with-dependents: the
// lines of the crontab file at path and the --dependent lines (crontab
// lines without their command), in zone tz.
func rerunDependents(with bool, path string, lines []string, tz string) ([]idem.JobDeps, error) {
	if !with {
		if path != "" || len(lines) > 0 {
			return nil, usageError(fmt.Errorf("--crontab and --dependent declare the jobs of --with-dependents: give it too"))
		}
		return nil, nil
	}
	if path == "" && len(lines) == 0 {
		return nil, usageError(fmt.Errorf("--with-dependents: name the jobs downstream and what they wait for, with --crontab FILE (the file of idem serve) or --dependent 'daily mail after:settle'"))
	}
	loc, err := loadZone(tz)
	if err != nil {
		return nil, usageError(err)
	}
	var jobs []crontab.Job
	if path != "" {
		f, err := os.Open(path)
		if err != nil {
			return nil, usageError(fmt.Errorf("--crontab: %w", err))
		}
		js, err := crontab.Parse(path, f, loc, false)
		f.Close()
		if err != nil {
			return nil, usageError(err)
		}
		jobs = append(jobs, js...)
	}
	for _, line := range lines {
		js, err := crontab.Parse("--dependent", strings.NewReader(line+" true"), loc, false)
		if err != nil {
			return nil, usageError(fmt.Errorf("--dependent %q: %w", line, err))
		}
		if len(js) != 1 {
			return nil, usageError(fmt.Errorf("--dependent %q: not one job line (a crontab line without its command: 'daily mail after:settle')", line))
		}
		jobs = append(jobs, js[0])
	}
	var deps []idem.JobDeps
	for _, j := range jobs {
		deps = append(deps, idem.JobDeps{Job: j.Name, Schedule: j.Sched, Options: j.Deps})
	}
	return deps, nil
}
