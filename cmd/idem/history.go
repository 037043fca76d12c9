package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemstore"
)

// revisionJSON is one revision of a period in `show --json`'s history: the
// re-run requests that made it (none for revision 0, the first run) and
// the attempts that ran it and ended.
type revisionJSON struct {
	Revision int64         `json:"revision"`
	Requests []requestJSON `json:"requests,omitempty"` // who asked for it, why, when
	Attempts []attemptJSON `json:"attempts,omitempty"` // oldest first
}

// requestJSON is a re-run request (idem rerun, idem.Rerun).
type requestJSON struct {
	RequestID string     `json:"request_id"`
	By        string     `json:"by,omitempty"`
	Reason    string     `json:"reason"`
	Requested *time.Time `json:"requested,omitempty"`
	State     string     `json:"state"` // queued, or pending (after the running attempt)
}

// attemptJSON is an attempt that ended.
type attemptJSON struct {
	Attempt int64      `json:"attempt"`
	Outcome string     `json:"outcome"` // done, failed, unknown, parked, abandoned
	Error   string     `json:"error,omitempty"`
	Owner   string     `json:"owner,omitempty"` // who ran it: host:pid:…
	Started *time.Time `json:"started,omitempty"`
	Ended   *time.Time `json:"ended,omitempty"`
}

// history reads key's history from s, by revision, oldest first; ok is
// false when the store keeps none (it is no idemstore.Historian).
func history(ctx context.Context, s any, rec idem.Record) (revs []revisionJSON, ok bool, err error) {
	hs, ok := s.(idemstore.Historian)
	if !ok {
		return nil, false, nil
	}
	h, err := hs.History(ctx, rec.Key)
	if err != nil {
		return nil, true, err
	}
	byRev := map[int64]*revisionJSON{}
	get := func(r int64) *revisionJSON {
		if byRev[r] == nil {
			byRev[r] = &revisionJSON{Revision: r}
		}
		return byRev[r]
	}
	get(0)
	get(rec.Revision)
	for _, q := range h.Reruns {
		r := get(q.Revision)
		r.Requests = append(r.Requests, requestJSON{RequestID: q.RequestID, By: q.By, Reason: q.Reason, Requested: utcPtr(q.Requested), State: q.State})
	}
	for _, a := range h.Attempts {
		r := get(a.Revision)
		r.Attempts = append(r.Attempts, attemptJSON{Attempt: a.Attempt, Outcome: a.Outcome, Error: a.Error, Owner: a.Owner,
			Started: utcPtr(a.Started), Ended: utcPtr(a.Ended)})
	}
	for _, r := range byRev {
		revs = append(revs, *r)
	}
	slices.SortFunc(revs, func(a, b revisionJSON) int { return int(a.Revision - b.Revision) })
	return revs, true, nil
}

// printHistory writes revs as show's text.
func printHistory(w io.Writer, revs []revisionJSON) {
	fmt.Fprintln(w, "history:")
	for _, r := range revs {
		if r.Revision == 0 {
			fmt.Fprintln(w, "  revision 0: the first run")
		} else {
			fmt.Fprintf(w, "  revision %d: a re-run\n", r.Revision)
		}
		for _, q := range r.Requests {
			state := ""
			if q.State == "pending" {
				state = " (waits for the running attempt to end done)"
			}
			fmt.Fprintf(w, "    requested %s by %s (request %s): %s%s\n", fmtTimePtr(q.Requested), orDash(q.By), q.RequestID, q.Reason, state)
		}
		if len(r.Attempts) == 0 {
			fmt.Fprintln(w, "    no attempt ended yet")
		}
		for _, a := range r.Attempts {
			line := fmt.Sprintf("    attempt %d %s: started %s, ended %s, by %s", a.Attempt, a.Outcome, fmtTimePtr(a.Started), fmtTimePtr(a.Ended), orDash(a.Owner))
			if a.Error != "" {
				line += ": " + truncate(a.Error, 200)
			}
			fmt.Fprintln(w, line)
		}
	}
}

func fmtTimePtr(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return fmtTime(*t)
}
