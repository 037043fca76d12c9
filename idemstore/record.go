package idemstore

import "time"

// Status is the state of a key's record.
type Status string

// The statuses a record can have.
const (
	StatusRunning Status = "running" // an attempt holds the key (its lease may have expired)
	StatusFailed  Status = "failed"  // the last attempt failed; retry allowed from NotBefore
	StatusDone    Status = "done"    // settled: the work is done
	StatusUnknown Status = "unknown" // an attempt may or may not have had its effect; awaiting Resolve or a DownstreamHas check
	StatusParked  Status = "parked"  // the backoff gave up, or fn's error was Permanent: awaiting Reset
	StatusSkipped Status = "skipped" // settled without running: catch-up coalesced it into a later period
)

// Record is what a store knows of one key.
type Record struct {
	Key        Key
	Status     Status
	Attempt    int64     // number of the latest attempt; the fencing token
	Failures   int       // consecutive failed or abandoned attempts since the last success, Reset or Resolve
	Owner      string    // holder of the latest attempt
	LeaseUntil time.Time // running: when the lease expires
	NotBefore  time.Time // failed: when the next attempt is allowed
	LastError  string    // the last failure, for people
	Updated    time.Time // when the record last changed
}

// Filter selects records for Lister.List. Zero fields match everything.
type Filter struct {
	Job    string
	Status Status
	Limit  int // at most this many records; 0 means no limit
}

// JobState is what a CatchUpStore keeps per job.
type JobState struct {
	Job     string
	Cursor  string // the latest period catch-up has settled, in order: every due period up to it is settled
	Horizon string // periods at or before it count as done; their records may be pruned
}
