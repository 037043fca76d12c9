package ui

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/idemgo/idem/idemstore"
)

// The actions, as the forms name them.
const (
	ResolveDone  = "resolve-done"  // the key's work happened: mark it done (Store.Resolve, ResolveDone)
	ResolveRetry = "resolve-retry" // it did not: the next run runs it (Store.Resolve, ResolveRetry)
	Reset        = "reset"         // un-park a parked or failed key; refuses an unknown one, as `idem reset` does
	OutboxRetry  = "outbox-retry"  // a parked message back to pending (OutboxStore.RetryOutbox)
	OutboxDrop   = "outbox-drop"   // delete a message (OutboxStore.DropOutbox)
)

// ErrResetRefused is the refusal of a Reset of a key that is not parked or
// failed (unknown, done, running) or has no record.
var ErrResetRefused = errors.New("ui: reset refused")

// action is one action on one key (or one outbox message, by ID).
type action struct {
	Do  string
	Key idemstore.Key
	ID  string
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
	}
	return ""
}

// parseAction reads an action from a request's form (query for GET, body
// for POST).
func parseAction(r *http.Request) (action, error) {
	if err := r.ParseForm(); err != nil {
		return action{}, err
	}
	a := action{Do: r.Form.Get("do"), Key: idemstore.Key{Job: r.Form.Get("job"), Period: r.Form.Get("period")}, ID: r.Form.Get("id")}
	switch a.Do {
	case ResolveDone, ResolveRetry, Reset:
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
		return a, fmt.Errorf("no action %q: use %s, %s, %s, %s or %s", a.Do, ResolveDone, ResolveRetry, Reset, OutboxRetry, OutboxDrop)
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
	if err := h.perform(r.Context(), a); err != nil {
		log.Warn("idem ui: action refused", "action", a.Do, "target", a.Target(), "err", err)
		h.render(w, "message", page{Heading: "Refused", Status: http.StatusConflict,
			Messages: []string{a.shown() + ": " + a.Do + " refused: " + err.Error()}, Data: back(a)})
		return
	}
	log.Info("idem ui: action", "action", a.Do, "target", a.Target())
	h.render(w, "message", page{Heading: "Done", Messages: []string{a.shown() + ": " + a.Do + " done"}, Data: back(a)})
}

// perform does the action with the store's own calls and errors; Reset
// first checks what `idem reset` checks.
func (h *Handler) perform(ctx context.Context, a action) error {
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
