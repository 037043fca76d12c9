package idem

import "time"

// Result describes one call of Run or RunTx (what [ReportTo] stores and
// [OnResult] gets), or one period of [CatchUp], or one call of Each or
// EachTx (for [OnResult]).
type Result struct {
	Key      Key
	Outcome  Outcome
	Attempt  int64         // the last attempt number this call held (0 if none); Each: that of the period's done mark
	Attempts int           // how many times this call ran fn; 0 for Each (see Items)
	Duration time.Duration // how long the call took
	Err      error         // what the call returned
	Items    ItemCounts    // Each and EachTx: the period's items by status when the call returned; zero for Run

	// Value is the value stored with the key's done mark, as stored (JSON;
	// see [RunValue]): the one this call stored (Ran), or the one a
	// duplicate trigger found (AlreadyDone). nil when there is none.
	Value []byte
}
