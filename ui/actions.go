package ui

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemstore"
)

// The actions, as the forms name them.
const (
	ResolveDone  = "resolve-done"  // the key's work happened: mark it done (Store.Resolve, ResolveDone)
	ResolveRetry = "resolve-retry" // it did not: the next run runs it (Store.Resolve, ResolveRetry)
	Reset        = "reset"         // un-park a parked or failed key; refuses an unknown one, as `idem reset` does
	OutboxRetry  = "outbox-retry"  // a parked message back to pending (OutboxStore.RetryOutbox)
	OutboxDrop   = "outbox-drop"   // delete a message (OutboxStore.DropOutbox)
	RunNow       = "run-now"       // ask the Schedulers running the job to run the period at once (idem.Wake), as `idem run-now` does
	Rerun        = "rerun"         // run a done period again, with a reason (idem.Rerun), as `idem rerun` does
)

// ErrRunNowRefused is the refusal of a RunNow of a period that is not
// runnable now (done, parked, unknown, backing off, running), naming what
// fits instead.
var ErrRunNowRefused = errors.New("ui: run now refused")

// ErrResetRefused is the refusal of a Reset of a key that is not parked or
// failed (unknown, done, running) or has no record.
var ErrResetRefused = errors.New("ui: reset refused")

// action is one action on one key (or one outbox message, by ID).
type action struct {
	Do  string
	Key idemstore.Key
	ID  string // an outbox message's; a re-run's request id
	// Reason is a re-run's (required), By who asked: the request's remote
	// address. Neither is part of the CSRF token.
	Reason, By string
}

func (a action) Outbox() bool { return a.Do == OutboxRetry || a.Do == OutboxDrop }

// Target names what the action changes, for the confirmation and the log.
func (a action) Target() string {
	if a.Outbox() {
		return "outbox message " + strconv.Quote(a.ID)
	}
	return a.Key.Job + " " + a.Key.Period
}

// shown is Target for a page: each store-held part isolated (see isolate).
func (a action) shown() string {
	if a.Outbox() {
		return "outbox message " + isolate(strconv.Quote(a.ID))
	}
	return isolate(a.Key.Job) + " " + isolate(a.Key.Period)
}

// What says what the action does, for the confirmation.
func (a action) What() string {
	switch a.Do {
	case ResolveDone:
		return "Resolve as done: its work happened; it never runs again."
	case ResolveRetry:
		return "Resolve for retry: its work did not happen; the next run runs it (failure count cleared)."
	case Reset:
		return "Reset: the next run retries it, its failure count cleared."
	case OutboxRetry:
		return "Retry: the parked message goes back to pending, due now, in its place in its topic."
	case OutboxDrop:
		return "Drop: the message is deleted and never delivered (again)."
	case RunNow:
		return "Run now: the Schedulers running the job look at it within seconds and run the period if it is due, rather than at the job's next due time."
	case Rerun:
		return "Re-run: the done period gets a new revision and runs once more (the Schedulers running the job within seconds), to repair its data. Say why."
	}
	return ""
}

// parseAction reads an action from a request's form (query for GET, body
// for POST).
func parseAction(r *http.Request) (action, error) {
	if err := r.ParseForm(); err != nil {
		return action{}, err
	}
	a := action{Do: r.Form.Get("do"), Key: idemstore.Key{Job: r.Form.Get("job"), Period: r.Form.Get("period")}, ID: r.Form.Get("id"),
		By: "operator page " + r.RemoteAddr}
	switch a.Do {
	case Rerun:
		a.Reason = strings.TrimSpace(r.Form.Get("reason"))
		if err := a.Key.Validate(); err != nil {
			return a, err
		}
	case ResolveDone, ResolveRetry, Reset, RunNow:
		a.ID = ""
		if err := a.Key.Validate(); err != nil {
			return a, err
		}
	case OutboxRetry, OutboxDrop:
		a.Key = idemstore.Key{}
		if a.ID == "" {
			return a, errors.New("no message id")
		}
	default:
		return a, fmt.Errorf("no action %q: use %s, %s, %s, %s, %s, %s or %s", a.Do, ResolveDone, ResolveRetry, Reset, RunNow, Rerun, OutboxRetry, OutboxDrop)
	}
	return a, nil
}

type confirmData struct {
	A     action
	CSRF  string
	Back  string // query of the page to go back to
	Field map[string]string
}

func back(a action) string {
	if a.Outbox() {
		return "outbox"
	}
	return "record?" + string(qs("job", a.Key.Job, "period", a.Key.Period))
}

// confirm shows the confirmation page of an action: what it does to which
// key, and the form that performs it.
func (h *Handler) confirm(w http.ResponseWriter, r *http.Request) {
	if !h.o.Actions {
		h.refuse(w, r, http.StatusForbidden, ErrActionsOff.Error())
		return
	}
	a, err := parseAction(r)
	if err != nil {
		h.refuse(w, r, http.StatusBadRequest, err.Error())
		return
	}
	if a.Outbox() {
		if _, ok := h.s.(OutboxStore); !ok {
			h.refuse(w, r, http.StatusNotFound, "this store has no outbox")
			return
		}
	}
	if why := h.lacks(a.Do); why != "" {
		h.refuse(w, r, http.StatusNotFound, why)
		return
	}
	if a.Do == Rerun {
		// The request's id, in the form: submitted twice (a double click,
		// a reload), the request re-runs the period once.
		a.ID = newRequestID()
	}
	h.render(w, "confirm", page{Heading: "Confirm", Data: confirmData{A: a, CSRF: h.csrf(a), Back: back(a)}})
}

// act performs an action: POST only, with the CSRF token of that action
// on that key, and only with Options.Actions.
func (h *Handler) act(w http.ResponseWriter, r *http.Request) {
	log := h.o.Logger.With("remote", r.RemoteAddr, "user_agent", r.UserAgent())
	r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
	a, err := parseAction(r)
	if !h.o.Actions {
		log.Warn("idem ui: action refused", "action", a.Do, "target", a.Target(), "why", "actions off")
		h.refuse(w, r, http.StatusForbidden, ErrActionsOff.Error())
		return
	}
	if err != nil {
		h.refuse(w, r, http.StatusBadRequest, err.Error())
		return
	}
	if !h.csrfOK(a, r.PostForm.Get("csrf")) {
		log.Warn("idem ui: action refused", "action", a.Do, "target", a.Target(), "why", "missing or wrong CSRF token")
		h.refuse(w, r, http.StatusForbidden, "missing or wrong CSRF token: open the action's confirmation page and submit it from there")
		return
	}
	if a.Do == Rerun && (a.ID == "" || a.Reason == "") {
		h.refuse(w, r, http.StatusBadRequest, "a re-run needs a reason (say why the period runs again) and its request id: submit the re-run's confirmation page")
		return
	}
	done, err := h.perform(r.Context(), a)
	if err != nil {
		log.Warn("idem ui: action refused", "action", a.Do, "target", a.Target(), "err", err)
		h.render(w, "message", page{Heading: "Refused", Status: http.StatusConflict,
			Messages: []string{a.shown() + ": " + a.Do + " refused: " + err.Error()}, Data: back(a)})
		return
	}
	if a.Do == Rerun {
		log.Info("idem ui: action", "action", a.Do, "target", a.Target(), "request", a.ID, "reason", a.Reason, "result", done)
	} else {
		log.Info("idem ui: action", "action", a.Do, "target", a.Target())
	}
	h.render(w, "message", page{Heading: "Done", Messages: []string{a.shown() + ": " + a.Do + " done" + done}, Data: back(a)})
}

// lacks says why the store cannot do action do ("" if it can).
func (h *Handler) lacks(do string) string {
	st, err := idemstore.Of(h.s)
	if err != nil {
		return err.Error()
	}
	switch do {
	case RunNow:
		if _, ok := st.(idemstore.Waker); !ok {
			return "this store keeps no wake marks (idemstore.Waker): the Schedulers cannot be asked to run a period now"
		}
	case Rerun:
		if _, ok := st.(idemstore.Rerunner); !ok {
			return "this store cannot re-run done periods (idemstore.Rerunner)"
		}
	}
	return ""
}

// newRequestID is a re-run request's id, made when its confirmation page
// is shown.
func newRequestID() string {
	b := make([]byte, 12)
	if _, err := rand.Read(b); err != nil {
		panic(err) // crypto/rand does not fail
	}
	return "ui-" + hex.EncodeToString(b)
}

// perform does the action with the store's own calls and errors; Reset
// and RunNow first check what `idem reset` and `idem run-now` check. done
// says what it did, beyond "done".
func (h *Handler) perform(ctx context.Context, a action) (done string, err error) {
	switch a.Do {
	case RunNow:
		rec, ok, err := h.s.Lookup(ctx, a.Key)
		if err != nil {
			return "", err
		}
		if why := notRunnableNow(rec, h.o.Now()); ok && why != "" {
			return "", fmt.Errorf("%w: %s %s %s", ErrRunNowRefused, a.Key.Job, a.Key.Period, why)
		}
		return ": the Schedulers running the job look at it within seconds", idem.Wake(ctx, h.s, a.Key.Job)
	case Rerun:
		out, err := idem.Rerun(ctx, h.s, idem.RerunRequest{Keys: []idemstore.Key{a.Key}, RequestID: a.ID, Reason: a.Reason, By: a.By})
		if err != nil {
			return "", err
		}
		return fmt.Sprintf(": revision %d, %s", out[0].Revision, out[0].State), nil
	}
	return "", h.performRepair(ctx, a)
}

// notRunnableNow says why a period with record rec cannot be run now,
// and what fits; "" if it can.
func notRunnableNow(rec idemstore.Record, now time.Time) string {
	switch rec.Status {
	case idemstore.StatusDone, idemstore.StatusSkipped:
		return "is " + string(rec.Status) + ": to run it again on purpose (to repair data), re-run it"
	case idemstore.StatusParked:
		return "is parked: fix the cause, then reset it (which wakes the Schedulers too)"
	case idemstore.StatusUnknown:
		return "has an unknown outcome: check whether its work happened, then resolve it done or for retry"
	case idemstore.StatusRunning:
		if now.Before(rec.LeaseUntil) {
			return "runs now"
		}
	case idemstore.StatusFailed:
		if now.Before(rec.NotBefore) {
			return "is backing off until " + rec.NotBefore.UTC().Format(time.RFC3339) + ": reset it to run it now"
		}
	}
	return ""
}

// performRepair does a resolve, a reset or an outbox action.
func (h *Handler) performRepair(ctx context.Context, a action) error {
	switch a.Do {
	case ResolveDone:
		return h.s.Resolve(ctx, a.Key, idemstore.ResolveDone)
	case ResolveRetry:
		return h.s.Resolve(ctx, a.Key, idemstore.ResolveRetry)
	case Reset:
		rec, ok, err := h.s.Lookup(ctx, a.Key)
		switch {
		case err != nil:
			return err
		case !ok:
			return fmt.Errorf("%w: %s %s has no record: it has not run, nothing to reset", ErrResetRefused, a.Key.Job, a.Key.Period)
		case rec.Status == idemstore.StatusUnknown:
			return fmt.Errorf("%w: %s %s is unknown, not parked: check whether its work happened, then resolve it done or for retry", ErrResetRefused, a.Key.Job, a.Key.Period)
		case rec.Status != idemstore.StatusParked && rec.Status != idemstore.StatusFailed:
			return fmt.Errorf("%w: %s %s is %s, not parked: nothing to reset", ErrResetRefused, a.Key.Job, a.Key.Period, rec.Status)
		}
		return h.s.Resolve(ctx, a.Key, idemstore.ResolveRetry)
	case OutboxRetry, OutboxDrop:
		ob, ok := h.s.(OutboxStore)
		if !ok {
			return errors.New("this store has no outbox")
		}
		if a.Do == OutboxRetry {
			return ob.RetryOutbox(ctx, a.ID, h.o.Now())
		}
		return ob.DropOutbox(ctx, a.ID)
	}
	return fmt.Errorf("no action %q", a.Do)
}
