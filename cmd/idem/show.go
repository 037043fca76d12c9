package main

import (
	"fmt"
	"strconv"
	"strings"
	"text/tabwriter"
	"unicode/utf8"

	"github.com/idemgo/idem"
	"github.com/spf13/cobra"
)

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

func newShowCmd() *cobra.Command {
	var asJSON bool
	var w waitFlags
	cmd := &cobra.Command{
		Use:   "show JOB PERIOD [--json]",
		Short: "Show one period's record and history: attempts, failures, last error, lease, backoff, re-runs",
		Long: `Show everything the ledger knows of one period of a job: its status,
attempt number, consecutive failures, last error, the lease owner (host:pid)
and until when the lease holds, the backoff's not-before time, when the
record last changed, and the request id the command got as $IDEM_REQUEST_ID.

Then its history (the SQLite and Postgres ledgers keep one): each revision
(0, the first run; then each re-run, with who asked for it, why and when)
and the attempts that ran it and ended: their outcome, error, owner and
times. --json gives it as "history".

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
			revs, kept, err := history(cmd.Context(), l.store, rec)
			if err != nil {
				return fail(exitFailed, "%w", err)
			}
			out := cmd.OutOrStdout()
			if asJSON {
				j := toJSON(rec)
				j.WaitsFor = waits
				j.History = revs
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
				{"revision", fmt.Sprint(rec.Revision)},
				{"request id", rec.Key.RevisionRequestID(rec.Revision)},
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
			if kept {
				printHistory(out, revs)
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
