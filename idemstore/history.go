package idemstore

import (
	"context"
	"time"
)

// AttemptRecord is one attempt of a period that ended, as a store's
// history keeps it.
type AttemptRecord struct {
	Revision int64  // the period's revision the attempt ran (0: its first run; n: the n-th re-run)
	Attempt  int64  // the attempt's number (the fencing token)
	Outcome  string // done, failed, unknown, parked, or abandoned (taken over: its lease expired, its process was gone)
	Error    string // the error it ended with ("" when done)
	Owner    string // who ran it: the holder's owner string (host:pid:…)
	Started  time.Time
	Ended    time.Time
}

// RerunRecord is one re-run request recorded for a period (idem.Rerun):
// who asked, why, when, and the revision it made.
type RerunRecord struct {
	RequestID string
	Revision  int64  // the revision the request made (or, for a period that had failed, the one that ran anyway)
	State     string // queued (the period has, or had, the revision) or pending (waiting for a running attempt's done mark)
	Reason    string
	By        string
	Requested time.Time
}

// History is what a store keeps of a period's past: its attempts that
// ended, oldest first (by revision, then attempt), and its re-run
// requests, oldest first. The attempt running now, if any, is in the
// period's Record, not here.
type History struct {
	Attempts []AttemptRecord
	Reruns   []RerunRecord
}

// Historian is a store that keeps the history of each period's attempts
// and re-run requests: `idem show` prints it. The SQLite ledger and the
// Postgres ledger (pgledger) implement it. A period that has no record
// has an empty History, not an error.
type Historian interface {
	History(ctx context.Context, key Key) (History, error)
}
