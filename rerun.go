package idem

import (
	"context"
	"time"

	"github.com/idemgo/idem/idemstore"
)

// ErrNotRerunnable: [Rerun] was asked for a period that cannot run again as
// it is (it never ran, is parked, has an unknown outcome, or was pruned);
// the error names the key and the command that fits (idem run, idem reset,
// idem resolve). The request changed nothing. It is package idemstore's.
var ErrNotRerunnable = idemstore.ErrNotRerunnable

// RerunRequest, RerunState and RerunOutcome are package idemstore's: see
// [Rerun].
type (
	RerunRequest = idemstore.RerunRequest
	RerunState   = idemstore.RerunState
	RerunOutcome = idemstore.RerunOutcome
)

// What a re-run request did to a period: see [idemstore.RerunState].
const (
	RerunQueued   = idemstore.RerunQueued
	RerunAfterRun = idemstore.RerunAfterRun
	RerunDue      = idemstore.RerunDue
	RerunSeen     = idemstore.RerunSeen
)

// Rerun asks for done periods to run again, on purpose: data was repaired
// (a flow table corrected, a report's bug fixed) and the periods' results
// must be computed anew. Each period in req.Keys gets a new revision
// (Record.Revision, Info.Revision) and the next trigger of its key (Run,
// RunTx, RunValue, a Scheduler's or the idem command's run of that
// period) runs fn once more, as its mode promises (exactly once in RunTx),
// even though the key was done. fn sees the revision in Info.Revision,
// and Info.RequestID is the revision's ([Key.RevisionRequestID]): a
// downstream that dedupes by it sees the re-run as new work, and
// outbox.Put in the re-run's RunTx gives messages ids of the revision. A
// stored value (RunValue) is replaced by the re-run's.
//
// The request is durable when Rerun returns, and applied to every period
// or to none. req.RequestID makes it idempotent: the same request sent
// again (a retrying script, a double click) re-runs nothing more
// (RerunSeen). A period an attempt holds when the request comes is re-run
// after that attempt ends done (RerunAfterRun). A period that failed and
// will run again is left so (RerunDue). A period that never ran, is
// parked or unknown, or was pruned is refused, with an error matching
// [ErrNotRerunnable] naming the command that fits, and nothing changes.
//
// Write the work as a recomputing upsert (SET amount = ?, never amount =
// amount + ?): a re-run repeats it over the rows of the first run. A
// TwoPhase check must ask the downstream for Info.RequestID (the
// revision's), not for the key: asked for the key, it finds the first
// run's effect and the re-run is marked done without running.
//
// A catch-up (CatchUp, CatchUpTx, a Scheduler, idem run) runs the re-run
// periods behind the job's cursor first, once each, each once what it
// depends on (After, AfterPrevious) is done: until then it waits, with no
// error (outcome Waiting). To re-run the periods downstream too, in
// dependency order, use [RerunWithDependents]. The
// store must implement
// [idemstore.Rerunner]: the SQLite ledger, the Postgres ledger (pgledger),
// the MySQL ledger (mysqlledger) and the Redis store (redisstore) do; the
// state file, and any other store, refuses with an error naming the store.
func Rerun(ctx context.Context, s Store, req RerunRequest) ([]RerunOutcome, error) {
	r, err := storeAs[idemstore.Rerunner]("Rerun", s)
	if err != nil {
		return nil, err
	}
	if req.Now.IsZero() {
		req.Now = time.Now()
	}
	return r.Rerun(ctx, req)
}
