package main

import (
	"context"
	"strings"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemstore"
	"github.com/spf13/cobra"
)

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
