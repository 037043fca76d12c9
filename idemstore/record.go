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

	// Fingerprint identifies the parameters of the work the key was first
	// claimed for (idem.WithParams): the lowercase hex of a SHA-256, or ""
	// when no claim gave one. A store sets it with the claim that takes a
	// key whose record has none, and keeps it through every later claim,
	// end, Resolve and Reset.
	Fingerprint string

	// Value is what the attempt that marked the key done stored with the
	// done mark (idem.RunValue: JSON, at most MaxValue bytes); nil when it
	// stored none. A store writes it only with a done mark, in the same
	// write, and keeps it while the key is done.
	Value []byte

	// Revision counts the re-runs of the period requested after it was
	// done (idem.Rerun): 0 until the first. A store that keeps no
	// revisions leaves it 0.
	Revision int64
}

// MaxValue is the largest Value a store must keep: idem refuses, before
// anything is marked done, a value that encodes to more bytes.
const MaxValue = 64 << 10

// ShortFingerprint is the short form of a fingerprint that messages show:
// its first 12 characters; "none" for "".
func ShortFingerprint(fp string) string {
	switch {
	case fp == "":
		return "none"
	case len(fp) > 12:
		return fp[:12]
	}
	return fp
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
