package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/cmd/idem/internal/spec"
	"github.com/idemgo/idem/idemstore"
	"github.com/spf13/cobra"
)

// recordJSON is a ledger record as `ls --json` and `show --json` print it.
// Times are RFC 3339 in UTC; a time that is not set is left out.
type recordJSON struct {
	Job        string     `json:"job"`
	Period     string     `json:"period"`
	Status     string     `json:"status"`
	Attempt    int64      `json:"attempt"`
	Failures   int        `json:"failures"`
	Owner      string     `json:"owner,omitempty"`
	LeaseUntil *time.Time `json:"lease_until,omitempty"`
	NotBefore  *time.Time `json:"not_before,omitempty"`
	LastError  string     `json:"last_error,omitempty"`
	Updated    *time.Time `json:"updated,omitempty"`
	RequestID  string     `json:"request_id"`

	Fingerprint string `json:"fingerprint,omitempty"`  // of the params (--params) it was first run with
	Value       string `json:"value,omitempty"`        // stored with the done mark (--capture), when it is text
	ValueBase64 string `json:"value_base64,omitempty"` // the same, when it is not UTF-8 text

	WaitsFor string `json:"waits_for,omitempty"` // with --after: the upstream periods it waits for
}

func utcPtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	u := t.UTC()
	return &u
}

func toJSON(r idem.Record) recordJSON {
	j := recordJSON{
		Job: r.Key.Job, Period: r.Key.Period, Status: string(r.Status), Attempt: r.Attempt, Failures: r.Failures,
		Owner: r.Owner, LeaseUntil: utcPtr(r.LeaseUntil), NotBefore: utcPtr(r.NotBefore), LastError: r.LastError,
		Updated: utcPtr(r.Updated), RequestID: r.Key.RequestID(), Fingerprint: r.Fingerprint,
	}
	if utf8.Valid(r.Value) {
		j.Value = string(r.Value)
	} else {
		j.ValueBase64 = base64.StdEncoding.EncodeToString(r.Value)
	}
	return j
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// inline reports whether show's table gives a stored value in its row:
// none, or one short line of printable text. Any other value is printed
// after the table, as it is.
func inline(v []byte) bool {
	return len(v) == 0 || len(v) <= 200 && utf8.Valid(v) && strings.IndexFunc(string(v), func(r rune) bool { return !strconv.IsPrint(r) }) < 0
}

// valueLine is a stored value in show's table: "-" for none, the value
// when it is inline, else where to find it.
func valueLine(v []byte) string {
	switch {
	case len(v) == 0:
		return "-"
	case inline(v):
		return string(v)
	}
	return fmt.Sprintf("%d bytes, below", len(v))
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func fmtTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

// passed reports whether catch-up has passed r's period: it is at or
// before its job's catch-up cursor and not settled (nor held by a live
// run), so no 'idem run' reaches it again. Catch-up leaves such a period
// behind only when it was not catch-up's to run: a run with --catch-up
// none, a library's plain Run, or an older idem whose catch-up could skip
// a job's failed first period.
func passed(r idem.Record, cursor string, now time.Time) bool {
	if cursor == "" || r.Key.Period > cursor {
		return false
	}
	switch r.Status {
	case idem.StatusFailed, idem.StatusUnknown, idem.StatusParked:
		return true
	case idem.StatusRunning:
		return !now.Before(r.LeaseUntil)
	}
	return false
}

// passedNote says what to do with a period catch-up has passed.
func passedNote(r idem.Record, cursor, hint string) string {
	return "catch-up has passed it (the job's cursor is " + cursor + "), so no 'idem run' retries it: " +
		"do its work by hand if it is not done, then: idem resolve" + hint + " " + r.Key.Job + " " + r.Key.Period + " --done"
}

// jobCursors returns the catch-up cursor of every job of recs.
func jobCursors(ctx context.Context, s idemstore.CatchUpStore, recs []idem.Record) (map[string]string, error) {
	cursors := map[string]string{}
	for _, r := range recs {
		if _, ok := cursors[r.Key.Job]; ok {
			continue
		}
		js, err := s.Job(ctx, r.Key.Job)
		if err != nil {
			return nil, err
		}
		cursors[r.Key.Job] = js.Cursor
	}
	return cursors, nil
}

// note says, for people, what a record's status means and what to do;
// cursor is the job's catch-up cursor.
func note(r idem.Record, cursor string, now time.Time, hint string) string {
	k := r.Key.Job + " " + r.Key.Period
	withErr := func(s string) string {
		if r.LastError != "" {
			return s + ": " + r.LastError
		}
		return s
	}
	if passed(r, cursor, now) {
		return passedNote(r, cursor, hint)
	}
	switch r.Status {
	case idem.StatusRunning:
		holder, _, _ := strings.Cut(r.Owner, ";") // host:pid:random
		switch {
		case now.Before(r.LeaseUntil) && idemstore.HolderGone(r.Owner):
			return "the run (" + holder + ") died: the next run recovers it at once by its mode"
		case now.Before(r.LeaseUntil):
			return "running (" + holder + "), lease until " + fmtTime(r.LeaseUntil)
		}
		return "lease expired " + fmtTime(r.LeaseUntil) + ": the run died; the next run recovers it by its mode"
	case idem.StatusFailed:
		if now.Before(r.NotBefore) {
			return withErr("backing off until " + fmtTime(r.NotBefore))
		}
		return withErr("the next run retries it")
	case idem.StatusUnknown:
		return withErr("check, then: idem resolve" + hint + " " + k + " --done|--retry")
	case idem.StatusParked:
		return withErr("fix, then: idem reset" + hint + " " + k)
	case idem.StatusSkipped:
		return r.LastError
	}
	return ""
}

func truncate(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) <= n {
		return s
	}
	return s[:n-3] + "..."
}

// openForOps opens an existing ledger for ls, show, resolve, reset, prune.
func openForOps(cmd *cobra.Command) (*ledger, idem.Clock, error) {
	clk, err := clock()
	if err != nil {
		return nil, nil, err
	}
	l, err := openLedger(cmd.Context(), cmd, clk, false)
	if err != nil {
		return nil, nil, err
	}
	return l, clk, nil
}

var statusNames = []string{"running", "failed", "done", "unknown", "parked", "skipped", "pending"}

func newLsCmd() *cobra.Command {
	var job, status string
	var asJSON bool
	var limit int
	var w waitFlags
	cmd := &cobra.Command{
		Use:   "ls [--job JOB] [--status STATUS] [--json]",
		Short: "List the periods in the ledger and their status",
		Long: `List the ledger's records, by job and period (oldest first). --limit N keeps
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

Exit status: 0 listed (perhaps nothing), 2 usage error or no ledger.`,
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

func newShowCmd() *cobra.Command {
	var asJSON bool
	var w waitFlags
	cmd := &cobra.Command{
		Use:   "show JOB PERIOD [--json]",
		Short: "Show one period's record: attempts, failures, last error, lease, backoff",
		Long: `Show everything the ledger knows of one period of a job: its status,
attempt number, consecutive failures, last error, the lease owner (host:pid)
and until when the lease holds, the backoff's not-before time, when the
record last changed, and the request id the command got as $IDEM_REQUEST_ID.

Period names are as 'idem ls' and $IDEM_PERIOD show them: 2026-10-27,
2026-W44, 2026-10, 2026-10-27T05:00Z.

With --after (as given to 'idem run', with its --schedule and --tz), a
period that is not done says what it waits for: the upstream periods not
done yet. A period that waits has no record (waiting claims nothing):
show then prints it as waiting, and exits 0.

Exit status: 0 shown, 1 no such record, 2 usage error or no ledger.`,
		Example: `  idem show settle 2026-10-27
  idem show mail 2026-10-27 --after settle --schedule daily --tz Asia/Shanghai
  idem show settle 2026-10-27 --json | jq .status`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			key := idem.Key{Job: args[0], Period: args[1]}
			if err := key.Validate(); err != nil {
				return usageError(err)
			}
			deps, err := w.parse(key.Job)
			if err != nil {
				return err
			}
			l, clk, err := openForOps(cmd)
			if err != nil {
				return err
			}
			defer l.close()
			rec, ok, err := l.store.Lookup(cmd.Context(), key)
			if err != nil {
				return fail(exitFailed, "%w", err)
			}
			waits := ""
			if deps != nil && (!ok || rec.Status != idem.StatusDone && rec.Status != idem.StatusSkipped) {
				if waits, err = deps.waiting(cmd.Context(), l.store, key); err != nil {
					return fail(exitFailed, "%w", err)
				}
			}
			if !ok && waits != "" {
				if asJSON {
					return writeJSON(cmd.OutOrStdout(), map[string]string{"job": key.Job, "period": key.Period, "status": "waiting", "waits_for": waits})
				}
				_, err := fmt.Fprintf(cmd.OutOrStdout(), "job:        %s\nperiod:     %s\nstatus:     waiting (not claimed: no record)\nwaits for:  %s\n", key.Job, key.Period, waits)
				return err
			}
			if !ok {
				return fail(exitFailed, "%s %s: no record in %s: it has not run (check the names with 'idem ls --job %s')",
					key.Job, key.Period, l.desc, shellQuote(key.Job))
			}
			js, err := l.store.Job(cmd.Context(), key.Job)
			if err != nil {
				return fail(exitFailed, "%w", err)
			}
			out := cmd.OutOrStdout()
			if asJSON {
				j := toJSON(rec)
				j.WaitsFor = waits
				return writeJSON(out, j)
			}
			tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
			owner := rec.Owner
			if owner == "" {
				owner = "-"
			}
			lastErr := rec.LastError
			if lastErr == "" {
				lastErr = "-"
			}
			for _, row := range [][2]string{
				{"job", rec.Key.Job},
				{"period", rec.Key.Period},
				{"status", string(rec.Status)},
				{"attempt", fmt.Sprint(rec.Attempt)},
				{"failures", fmt.Sprint(rec.Failures)},
				{"last error", lastErr},
				{"lease owner", owner},
				{"lease until", fmtTime(rec.LeaseUntil)},
				{"not before", fmtTime(rec.NotBefore)},
				{"updated", fmtTime(rec.Updated)},
				{"request id", rec.Key.RequestID()},
				{"params", orDash(rec.Fingerprint)},
				{"value", valueLine(rec.Value)},
			} {
				fmt.Fprintf(tw, "%s:\t%s\n", row[0], row[1])
			}
			if waits != "" {
				fmt.Fprintf(tw, "waits for:\t%s\n", waits)
			}
			if rec.Status == idem.StatusDone && rec.Attempt == 0 && rec.Updated.IsZero() {
				fmt.Fprintf(tw, "note:\t%s\n", "pruned: at or before the job's prune horizon, it counts as done forever")
			} else if n := note(rec, js.Cursor, clk.Now(), ledgerHint(cmd)); n != "" && n != rec.LastError {
				fmt.Fprintf(tw, "note:\t%s\n", n)
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			if !inline(rec.Value) {
				fmt.Fprintf(out, "--- value (%d bytes) ---\n%s", len(rec.Value), rec.Value)
				if rec.Value[len(rec.Value)-1] != '\n' {
					fmt.Fprintln(out)
				}
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print a JSON object, for scripts")
	w.add(cmd)
	return cmd
}

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

// passedAfterRetry returns, for a key just resolved for retry, what to do
// if catch-up has passed it ("" if it has not: the next run retries it).
func passedAfterRetry(cmd *cobra.Command, s idemstore.CatchUpStore, key idem.Key, now time.Time) (string, error) {
	js, err := s.Job(cmd.Context(), key.Job)
	if err != nil {
		return "", err
	}
	rec := idem.Record{Key: key, Status: idem.StatusFailed}
	if !passed(rec, js.Cursor, now) {
		return "", nil
	}
	return passedNote(rec, js.Cursor, ledgerHint(cmd)), nil
}

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

type pruneJSON struct {
	Job     string `json:"job"`
	Through string `json:"through"`
	Deleted int64  `json:"deleted"`
}

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
