package idem

import "github.com/idemgo/idem/idemstore"

// Store keeps one record per [Key] and makes the state changes of the Run
// protocol atomic: what [SetDefault] and [RunOn] take. [Ledger]
// (SQLite), [StateFile] and the Postgres ledger (module pgledger) implement
// it. The interfaces stores implement, and the protocol rules they share,
// are in package idemstore; a store of your own is written against it and
// proved with package idemtest.
type Store = idemstore.Store

// Record is what a store knows of one key: what [Ledger.Lookup] and
// [Ledger.List] return.
type Record = idemstore.Record

// Status is the state of a key's record.
type Status = idemstore.Status

// The statuses a record can have.
const (
	StatusRunning = idemstore.StatusRunning // an attempt holds the key (its lease may have expired)
	StatusFailed  = idemstore.StatusFailed  // the last attempt failed; retry allowed from NotBefore
	StatusDone    = idemstore.StatusDone    // settled: the work is done
	StatusUnknown = idemstore.StatusUnknown // an attempt may or may not have had its effect; awaiting Resolve or a DownstreamHas check
	StatusParked  = idemstore.StatusParked  // the backoff gave up, or fn's error was Permanent: awaiting Reset
	StatusSkipped = idemstore.StatusSkipped // settled without running: catch-up coalesced it into a later period
)

// Filter selects records for [Ledger.List]. Zero fields match everything.
type Filter = idemstore.Filter

// JobState is what a store keeps per job for a catch-up (package catchup): its cursor and
// retention horizon ([Ledger.Job]).
type JobState = idemstore.JobState

// Resolution is what an operator decides for a key with Resolve
// ([Ledger.Resolve]).
type Resolution = idemstore.Resolution

// The resolutions.
const (
	ResolveDone  = idemstore.ResolveDone  // the work did happen: mark the key done
	ResolveRetry = idemstore.ResolveRetry // the work did not happen: allow a new attempt now, failure count cleared
	ResolveSkip  = idemstore.ResolveSkip  // settle without running: catch-up coalesced the period into a later one
)
