package idemstore

import (
	"context"
	"time"
)

// Store keeps one record per [Key] and makes the state changes of the Run
// protocol atomic. idem.Ledger (SQLite), idem.StateFile and the Postgres
// ledger implement it; a store of your own plugs into idem.RunOn the same
// way and can prove itself with the conformance suite in package idemtest.
//
// Every method must be atomic: after a crash at any instruction, the record
// is as it was before the call or as the call left it, never in between.
// Methods that take an attempt are fenced: they change the record only if its
// attempt is still that attempt and return [ErrLeaseLost] otherwise.
//
// Times: a store that keeps its own clock (a database server's now()) may
// ignore the Now fields and use it instead, as long as it uses one clock for
// every holder.
type Store interface {
	// Claim reads the key's record and, if no live attempt holds it and it is
	// not settled, takes it for a new attempt with a higher attempt number,
	// in one atomic step. It must not write when the key is done.
	//
	// An attempt is live while its lease holds, unless [HolderGone] says
	// that its Owner's process has ended: a store should then take the key
	// over at once, as if the lease had expired (Doubt set, the abandoned
	// attempt counted as a failure, a LastError that says its process
	// died: [AbandonedNote]), with the same fencing by the abandoned
	// attempt. [Decide] is that rule; Resolve applies it too ([Resolvable]).
	// A store that does not is still correct: it takes a dead holder's key
	// over when its lease expires.
	Claim(ctx context.Context, req ClaimRequest) (Claim, error)

	// Renew extends the lease of attempt to now+lease.
	Renew(ctx context.Context, key Key, attempt int64, now time.Time, lease time.Duration) error

	// Finish records how attempt ended. A Finish to StatusDone must be durable
	// (survive power loss) before it returns.
	Finish(ctx context.Context, key Key, attempt int64, end End) error

	// Resolve settles a key by hand: to done, or back to retryable with its
	// failure count cleared. It refuses ([ErrNotResolvable]) a key that is
	// done or held by a live attempt: [Resolvable] says which, and
	// [Resolved] what the record becomes.
	Resolve(ctx context.Context, key Key, to Resolution) error

	// Lookup returns the key's record; ok is false if there is none.
	Lookup(ctx context.Context, key Key) (rec Record, ok bool, err error)
}

// TxStore is a Store whose records live in a database that also holds the
// caller's business data, so the business writes and the done mark can
// commit in one transaction. Tx is the transaction type handed to fn
// (*sql.Tx for idem.Ledger, pgx.Tx for the Postgres ledger).
type TxStore[Tx any] interface {
	Store

	// FinishTx begins a transaction, checks that attempt still holds the key
	// (ErrLeaseLost otherwise), calls fn with the transaction, marks attempt
	// done in the same transaction and commits durably. If fn or anything
	// else fails, it rolls back: neither the business writes nor the mark
	// take effect, and FinishTx returns an error (fn's own error may be
	// returned as it is, or wrapped: the engine knows whether fn failed). While fn runs, no other attempt may take the key over
	// (a write lock or row lock held by the transaction ensures it).
	// Before committing it calls [Checkpoint] with [AfterFn]. With cursor,
	// the same transaction also moves the job's catch-up cursor forward to
	// key.Period, as Advance does (idem.CatchUpTx; a store that is not a
	// [CatchUpStore] is never asked to).
	//
	// fn returns the value to store with the done mark (End.Value; nil for
	// none), in the same transaction.
	FinishTx(ctx context.Context, key Key, attempt int64, now time.Time, cursor bool, fn func(Tx) ([]byte, error)) error
}

// FreshTxStore is a TxStore that can also claim a key that has no record,
// run fn and mark the key done in ONE transaction: idem.RunTx's common
// case, a new key, then costs one transaction instead of two. The SQLite
// ledger implements it.
type FreshTxStore[Tx any] interface {
	TxStore[Tx]

	// ClaimFinishTx is Claim for RunTx: it claims req.Key as Claim does and
	// returns the claim, with done=false. But if the key has no record (and
	// is not below its job's retention horizon), it begins a transaction,
	// records the key as attempt 1 held by req.Owner until
	// req.Now+req.Lease, calls [Checkpoint] with [AfterClaim], calls fn with
	// the transaction, marks attempt 1 done, calls Checkpoint with
	// [AfterFn] and commits durably: it returns the claim of attempt 1 with
	// done=true. If fn fails, fn's writes are rolled back and the claim
	// alone is committed: it returns the claim of attempt 1 and the error fn
	// returned, as is (the caller goes on as after any failed attempt). Any
	// other error means nothing was committed. While fn runs no other
	// attempt can claim the key. With cursor, the done mark moves the job's
	// catch-up cursor as in FinishTx, in the same transaction.
	// The claim stores req.Fingerprint; the done mark, the value fn returns,
	// as in FinishTx.
	ClaimFinishTx(ctx context.Context, req ClaimRequest, cursor bool, fn func(Tx) ([]byte, error)) (c Claim, done bool, err error)
}

// ClaimFirst marks a [FreshTxStore] whose ClaimFinishTx commits the claim
// of attempt 1 in a transaction of its own before fn's transaction begins,
// instead of in fn's (pgledger's Ledger does, to save round trips while
// the key is seen held during fn and a crash during fn counts the
// attempt): what it leaves after a crash, a failed fn or a failed commit
// is then what Claim followed by FinishTx would leave. If ClaimFinishTx
// fails after its claim committed (other than in fn), it returns that
// claim with done=false and no error, and the caller goes on with
// FinishTx as after Claim.
type ClaimFirst interface {
	ClaimCommittedFirst()
}

// FreshMarker is a Store that can mark a key that has no record done in
// one write, with no attempt before it: the period of idem.Each has no
// work of its own, and once its items are settled its done mark is all
// that is left. The Postgres and MySQL ledgers implement it.
type FreshMarker interface {
	Store

	// MarkFresh writes req.Key's record as done, attempt 1 held by
	// req.Owner, with req.Fingerprint and no value, durably, if the key
	// has no record and its job's horizon does not cover it. It returns
	// true when the key is done after it: it wrote the record, or found
	// the key done with a fingerprint that req's matches (another holder
	// marked it; then it wrote nothing). Otherwise it writes nothing and
	// returns false: the caller claims the key the usual way. It calls
	// [Checkpoint] with [AfterClaim] and then [AfterFn] before it writes; a
	// stop at either leaves nothing written. It never waits long for a
	// transaction that holds the key's row: giving up on one is an error,
	// and nothing was written.
	MarkFresh(ctx context.Context, req ClaimRequest) (done bool, err error)
}

// CatchUpStore is a Store that also keeps, per job, a catch-up cursor and
// a retention horizon. idem.CatchUp and the idem command's prune need one.
// For the state file, the job's watermark is both.
type CatchUpStore interface {
	Store

	// Job returns the job's cursor and horizon ("" when none).
	Job(ctx context.Context, job string) (JobState, error)

	// Start records where a job's catch-up begins: if the job has no
	// cursor, it sets the cursor to before (the period just before the
	// job's first period), durably; a job that has a cursor keeps it. It
	// returns the job's state afterwards. idem.CatchUp calls it once, before
	// the first period of a job ever runs, so that a first period that
	// fails is where every later call starts; and since a cursor, once
	// there, is left as it is, concurrent first calls with different
	// clocks cannot move the start past an unsettled period.
	Start(ctx context.Context, job, before string) (JobState, error)

	// Advance moves the job's cursor forward to period; a cursor already at
	// or after period is left as it is. Catch-up calls it for periods it
	// found settled without writing (already done, skipped).
	Advance(ctx context.Context, job, period string) error

	// Prune deletes the records of the job's settled (done or skipped)
	// periods at or before through, and raises the job's horizon to
	// through: from then on every period at or before the horizon counts as
	// done, record or not, so pruning never re-opens a period. It refuses,
	// with [ErrPruneRefused], a through after the job's cursor when the job
	// has one (catch-up could still reach those periods), or when a record
	// at or before through is not settled ([Prunable]).
	Prune(ctx context.Context, job, through string) (deleted int64, err error)
}

// CatchUpTxStore is a store that idem.CatchUpTx can use: a
// [CatchUpStore] whose records live in the database of the business data
// ([TxStore]). idem.Ledger is one with *sql.Tx; the Postgres ledger with
// pgx.Tx.
type CatchUpTxStore[Tx any] interface {
	CatchUpStore
	TxStore[Tx]
}

// Lister is a store that can list its records, for operators' tools and
// metrics. The ledgers implement it.
type Lister interface {
	// List returns the records that match f, ordered by job, then period.
	List(ctx context.Context, f Filter) ([]Record, error)
}

// Releaser is a Store that holds resources bound to this process for an
// attempt it claimed (the state file holds the job's lock from Claim to
// Finish). The engine calls Release whenever an attempt it holds ends
// without its end recorded (a crash point stopped the run, fn panicked,
// the lease was lost, Finish kept failing), as the kernel would release
// them if the process died. Release drops what this process holds for
// key's attempt, writing nothing; for any other attempt it does nothing.
type Releaser interface {
	Release(key Key, attempt int64)
}

// ClaimRequest asks a store to take a key for a new attempt.
type ClaimRequest struct {
	Key   Key
	Owner string        // who is claiming: host, pid, a random part and what proves the process's death (see HolderGone); store it as it is
	Now   time.Time     // the claimer's clock
	Lease time.Duration // how long the claim holds without renewal

	// Durable asks for the claim to survive power loss before Claim
	// returns. Modes that must remember an attempt that may have had an
	// effect (AtMostOnce, TwoPhase) set it; AtLeastOnce does not need it,
	// since a claim lost to power loss only means the work runs again.
	Durable bool

	// TakeUnknown lets the claim take a key whose status is unknown, to
	// check it (TwoPhase). Without it, such a key yields ClaimUnknown.
	TakeUnknown bool

	// Fingerprint identifies the parameters of the work (idem.WithParams),
	// "" for none. A key whose record has a different fingerprint yields
	// ClaimMismatch and nothing is written ([Decide]); a claim that takes
	// a key whose record has none stores this one (Record.Fingerprint).
	Fingerprint string
}

// ClaimState is what a Claim found.
type ClaimState int

// The answers of Store.Claim.
const (
	ClaimAcquired   ClaimState = iota + 1 // the key is ours, for Claim.Attempt
	ClaimDone                             // the key is done; nothing was written
	ClaimBusy                             // a live attempt of another holder has it
	ClaimBackingOff                       // failed; next attempt allowed at Record.NotBefore
	ClaimUnknown                          // status unknown, and TakeUnknown was not set
	ClaimParked                           // parked until Reset
	ClaimSkipped                          // settled as skipped; nothing was written
	ClaimMismatch                         // the record's fingerprint differs from the request's; nothing was written
)

// Claim is the answer to a ClaimRequest.
type Claim struct {
	State   ClaimState
	Attempt int64 // ClaimAcquired: the new attempt number, higher than every earlier one
	// Doubt is set when the key was acquired from an attempt that may have had
	// its effect: one whose lease expired while running, or one of status
	// unknown. The caller decides (by mode) whether to run again.
	Doubt bool
	// Record is the record as it was before the claim; for ClaimAcquired
	// Failures counts an abandoned attempt already. For ClaimDone a store
	// may fill in only Key, Status, Fingerprint and Value (the engine needs
	// no more, and a duplicate trigger is the path to keep cheap); for
	// ClaimMismatch, Key, Status and Fingerprint.
	Record Record

	// Now, for ClaimAcquired, is the time the claim was written as, from
	// which its lease counts, on the claimer's clock: a store that waited
	// for a lock before it could write moves ClaimRequest.Now forward by
	// the wait (the SQLite ledger does). Zero means ClaimRequest.Now.
	Now time.Time
}

// End is how an attempt ended, for Store.Finish.
type End struct {
	Status    Status    // StatusDone, StatusFailed, StatusUnknown or StatusParked
	Now       time.Time // the finisher's clock
	NotBefore time.Time // StatusFailed: earliest next attempt
	Failures  int       // the record's failure count from now on
	Error     string    // what went wrong, for people; empty for done

	// Value is stored with a StatusDone end, in the same write
	// (Record.Value); nil stores none. The engine never sends more than
	// [MaxValue] bytes.
	Value []byte

	// Cursor asks a StatusDone finish to also move the job's catch-up
	// cursor forward to this period, in the same transaction (CatchUpStore).
	Cursor bool
}

// Resolution is what an operator decides for a key with Resolve.
type Resolution int

// The resolutions.
const (
	ResolveDone  Resolution = iota + 1 // the work did happen: mark the key done
	ResolveRetry                       // the work did not happen: allow a new attempt now, failure count cleared
	ResolveSkip                        // settle without running: catch-up coalesced the period into a later one
)
