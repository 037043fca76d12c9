package idem

import "fmt"

// Outcome says how a Run ended.
type Outcome int

// The outcomes of a Run. Run returns nil for [Ran], [AlreadyDone],
// [Recovered] and [Skipped]; the others come with an error matching the sentinel named,
// except [Waiting], which only a catch-up reports, for a period it did not start.
const (
	Ran            Outcome = iota + 1 // fn ran now and its done mark committed
	AlreadyDone                       // an earlier run had finished the key; fn did not run
	Recovered                         // a doubtful earlier attempt was confirmed by DownstreamHas and marked done; fn did not run
	Skipped                           // the period was settled as skipped (catch-up coalesced it); fn did not run
	InProgress                        // ErrInProgress
	Unknown                           // ErrUnknownOutcome
	BackingOff                        // ErrBackingOff
	Parked                            // ErrParked
	LeaseLost                         // ErrLeaseLost
	Failed                            // fn or the store failed, and the run stopped before the key was settled (its context ended, or the store returned an error)
	ParamsMismatch                    // ErrParamsMismatch: the key was claimed with other parameters (WithParams); fn did not run, nothing was written
	Deferred                          // ErrDeferred: a guard or a breaker stopped the call before it claimed (more) work; nothing was counted as a failure
	Waiting                           // a catch-up's period waits for periods of other jobs (idem.After): not claimed, no attempt counted; no error
)

var outcomeNames = [...]string{
	Ran: "ran", AlreadyDone: "already_done", Recovered: "recovered", Skipped: "skipped", InProgress: "in_progress",
	Unknown: "unknown", BackingOff: "backing_off", Parked: "parked", LeaseLost: "lease_lost", Failed: "failed",
	ParamsMismatch: "params_mismatch",
	Deferred:       "deferred",
	Waiting:        "waiting",
}

// String returns a short snake_case name, suitable as a metric label.
func (o Outcome) String() string {
	if o > 0 && int(o) < len(outcomeNames) {
		return outcomeNames[o]
	}
	return fmt.Sprintf("Outcome(%d)", int(o))
}

// MarshalText returns String's name, so that an Outcome reads as
// "ran", "parked", ... in JSON.
func (o Outcome) MarshalText() ([]byte, error) { return []byte(o.String()), nil }

// UnmarshalText is MarshalText's inverse.
func (o *Outcome) UnmarshalText(b []byte) error {
	for i, name := range outcomeNames {
		if name != "" && name == string(b) {
			*o = Outcome(i)
			return nil
		}
	}
	return fmt.Errorf("idem: no outcome is named %q", b)
}

// NotNow reports whether o says "not now" rather than "failed":
// [InProgress] (another holder, such as another replica, is running the
// period), [Deferred] (a guard, a breaker or a shared limit held the call
// back before it claimed work) and [Waiting]. The first two come with an
// error, yet nothing failed and no attempt was counted. The metrics'
// error counters (idem_errors_total in package prom, idem.errors in
// package otel) do not count them, and a span ending with one keeps its
// status unset: one definition for both.
func (o Outcome) NotNow() bool {
	return o == InProgress || o == Deferred || o == Waiting
}

func (o Outcome) sentinel() error {
	switch o {
	case InProgress:
		return ErrInProgress
	case Unknown:
		return ErrUnknownOutcome
	case BackingOff:
		return ErrBackingOff
	case Parked:
		return ErrParked
	case LeaseLost:
		return ErrLeaseLost
	case ParamsMismatch:
		return ErrParamsMismatch
	case Deferred:
		return ErrDeferred
	}
	return nil
}
