package main

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/idemgo/idem"
	idemholder "github.com/idemgo/idem/internal/holder"
)

// reporter prints what happened to each period on stderr: failures always,
// successes with --verbose.
type reporter struct {
	w       io.Writer
	job     string
	verbose bool
	hint    string
	none    bool // --catch-up none: a later run retries a period only while it is the latest due one
	// idem serve: a period another replica holds is the normal case, not
	// a fault: reported with verbose only, and as such.
	replicas bool
	ended    func() // called first for every period (the $IDEM_CLOCK=skip clock's)
}

func (r reporter) period(pr idem.PeriodResult) {
	if r.ended != nil {
		r.ended()
	}
	name := r.job + " " + pr.Period.Name
	var ie *idem.Error
	_ = errors.As(pr.Err, &ie)
	cause := func() string {
		var err error
		switch {
		case ie != nil:
			err = ie.Err
		default:
			err = pr.Err
		}
		if err == nil {
			return ""
		}
		return ": " + strings.ReplaceAll(err.Error(), "\n", "; ")
	}
	attempt := ""
	if ie != nil && ie.Attempt > 0 {
		attempt = fmt.Sprintf(" (attempt %d)", ie.Attempt)
	}
	switch pr.Outcome {
	case idem.Ran, idem.Recovered, idem.AlreadyDone, idem.Skipped:
		if r.verbose && pr.Err == nil {
			fmt.Fprintf(r.w, "idem: %s: %s\n", name, strings.ReplaceAll(pr.Outcome.String(), "_", " "))
		}
		if pr.Err == nil {
			return
		}
		fmt.Fprintf(r.w, "idem: %s: %v\n", name, pr.Err)
	case idem.Waiting:
		if r.replicas { // idem serve: it looks again by itself; say so each time only with -v
			if r.verbose {
				fmt.Fprintf(r.w, "idem: %s: waiting for %s; not started yet\n", name, pr.Waiting)
			}
			return
		}
		fmt.Fprintf(r.w, "idem: %s: waiting for %s (--after); nothing was started, a later run starts it\n", name, pr.Waiting)
	case idem.Deferred:
		fmt.Fprintf(r.w, "idem: %s: not started%s; a later run starts it\n", name, cause())
	case idem.InProgress:
		holder := ""
		if ie != nil && ie.Holder != "" {
			holder = " (" + idemholder.Short(ie.Holder) + ")"
		}
		if r.replicas {
			if r.verbose {
				fmt.Fprintf(r.w, "idem: %s: held by another replica%s; not started here (looked at again after --lease, in case that replica died)\n", name, holder)
			}
			return
		}
		fmt.Fprintf(r.w, "idem: %s: busy: another run holds this period%s; nothing was started. A run killed on another host holds it until its lease expires (one killed on this host is taken over at once).\n", name, holder)
	case idem.Unknown:
		fmt.Fprintf(r.w, "idem: %s: outcome unknown%s%s\n  The command may or may not have done its work. Check, then run\n    idem resolve%s %s %s --done    if it did\n    idem resolve%s %s %s --retry   if it did not\n",
			name, attempt, cause(), r.hint, r.job, pr.Period.Name, r.hint, r.job, pr.Period.Name)
	case idem.BackingOff:
		// The attempt that failed last: this run's, or an earlier run's
		// that this one found backing off.
		until, failed := "", ""
		if ie != nil && !ie.NotBefore.IsZero() {
			until = " until " + ie.NotBefore.UTC().Format(time.RFC3339)
		}
		if ie != nil && ie.Attempt > 0 {
			failed = fmt.Sprintf(" after attempt %d failed", ie.Attempt)
		}
		fmt.Fprintf(r.w, "idem: %s: backing off%s%s%s\n  A run after that time retries it%s; 'idem reset%s %s %s' allows it now.\n",
			name, until, failed, cause(), r.whileLatest(), r.hint, r.job, pr.Period.Name)
	case idem.Parked:
		fmt.Fprintf(r.w, "idem: %s: parked%s%s\n  Fix the cause, then run: idem reset%s %s %s\n",
			name, attempt, cause(), r.hint, r.job, pr.Period.Name)
		if r.none {
			fmt.Fprintf(r.w, "  After the reset, a run retries it%s.\n", r.whileLatest())
		}
	case idem.LeaseLost:
		fmt.Fprintf(r.w, "idem: %s: lease lost%s%s\n  This run stalled longer than --lease and a newer run took the period over.\n", name, attempt, cause())
	case idem.ParamsMismatch:
		fmt.Fprintf(r.w, "idem: %s: params mismatch%s\n  The period was first run with other --params (or another command line, with --params-from-args); nothing was started. 'idem show%s %s %s' prints its fingerprint.\n",
			name, cause(), r.hint, r.job, pr.Period.Name)
	default:
		fmt.Fprintf(r.w, "idem: %s: failed%s%s\n", name, attempt, cause())
	}
}

// whileLatest is the condition on a later run's retry of a failed period.
func (r reporter) whileLatest() string {
	if r.none {
		return " only while it is the latest due period (--catch-up none runs no other)"
	}
	return ""
}
