package idemstore

import (
	"context"
	"errors"
	"time"
)

// ErrMessageNotFound: ListOutbox found no message with the id that
// RetryOutbox or DropOutbox named, or the message is not in a state the
// call can change (RetryOutbox: not parked). Nothing was written.
var ErrMessageNotFound = errors.New("idem: outbox message not found")

// OutboxStatus is the state of an outbox message.
type OutboxStatus string

// The statuses of an outbox message.
const (
	OutboxPending   OutboxStatus = "pending"   // waiting to be delivered (maybe leased by a relay, or backing off)
	OutboxDelivered OutboxStatus = "delivered" // the deliverer accepted it; kept until pruned
	OutboxParked    OutboxStatus = "parked"    // given up on: the last attempt failed, or the error was permanent
)

// OutboxMessage is a message that a transaction queued (outbox.Put), as the
// store writes it.
type OutboxMessage struct {
	ID      string            // stable: the request id of its key (or item) and its index in the attempt
	Topic   string            // messages of one topic are delivered in order
	Payload []byte            // the body, as given
	Headers map[string]string // nil or empty for none
	Key     Key               // the key whose transaction queued it
	Item    string            // EachTx: the item; "" otherwise
	Created time.Time         // the clock of the run that queued it
}

// OutboxRecord is what a store knows of one outbox message.
type OutboxRecord struct {
	OutboxMessage
	Seq        int64        // the store's order: increasing in commit order within a topic
	Status     OutboxStatus // pending, delivered or parked
	Attempts   int          // delivery attempts handed out so far (claims)
	Token      int64        // the fencing token of the latest claim; higher at every claim
	Owner      string       // the relay that holds or last held it
	LeaseUntil time.Time    // while a relay holds it
	NotBefore  time.Time    // pending after a failure: the next attempt's earliest time
	LastError  string       // the last failure, for people
	Delivered  time.Time    // delivered: when
}

// OutboxTxStore is a store whose database can hold the outbox of a
// transaction of type Tx (outbox.Put). The SQLite ledger implements it with
// *sql.Tx, the Postgres ledger with pgx.Tx (and DBLedger with *sql.Tx).
type OutboxTxStore[Tx any] interface {
	// PutOutbox writes msgs, pending and due at once, in tx: the
	// transaction of a RunTx, EachTx or idem.CatchUpTx body, so they commit
	// with the business writes and the done mark, or not at all. Within a
	// topic, messages are ordered by commit and, in one transaction, in
	// the order given. An id that is already stored is an error (nothing
	// of the call is kept: the caller's transaction fails).
	PutOutbox(ctx context.Context, tx Tx, msgs []OutboxMessage) error
}

// OutboxStore is the relay's side of an outbox (idem.Relay): claims with a
// lease and a fencing token, fenced ends, and operators' calls. All times
// are the caller's clock (Now fields and arguments).
type OutboxStore interface {
	// ClaimOutbox takes up to req.N messages that are due: pending, not
	// leased (LeaseUntil at or before req.Now), NotBefore at or before
	// req.Now, and the first pending message of their topic (a message is
	// never handed out while an earlier message of its topic is pending,
	// whether leased, backing off or due: order per topic). Each one taken
	// gets Owner, LeaseUntil = Now+Lease, Attempts+1 and a new Token, in
	// one atomic step; two concurrent claims never take the same message
	// while its lease holds. It returns them in Seq order.
	ClaimOutbox(ctx context.Context, req OutboxClaimRequest) ([]OutboxRecord, error)

	// DeliveredOutbox marks the message delivered at now if its latest
	// claim is token (fenced: [ErrLeaseLost] otherwise, nothing written).
	DeliveredOutbox(ctx context.Context, id string, token int64, now time.Time) error

	// FailOutbox records a failed delivery of the claim token (fenced as
	// DeliveredOutbox): with f.Park the message is parked with f.Error;
	// otherwise it stays pending, due at f.NotBefore, its lease released.
	FailOutbox(ctx context.Context, id string, token int64, f OutboxFailure) error

	// ListOutbox returns the messages that match f, in Seq order.
	ListOutbox(ctx context.Context, f OutboxFilter) ([]OutboxRecord, error)

	// RetryOutbox puts a parked message back to pending, due at now, its
	// attempts cleared ([ErrMessageNotFound] when there is no parked
	// message with that id). It keeps its place (Seq): it holds back the
	// later messages of its topic that are still pending, and comes after
	// those delivered while it was parked.
	RetryOutbox(ctx context.Context, id string, now time.Time) error

	// DropOutbox deletes the message, whatever its state
	// ([ErrMessageNotFound] when there is none). A dropped message is
	// never delivered (again); a relay holding it finds its end refused.
	DropOutbox(ctx context.Context, id string) error

	// PruneOutbox deletes the messages delivered before before, and
	// returns how many.
	PruneOutbox(ctx context.Context, before time.Time) (int64, error)

	// OutboxStats counts the messages per topic, in topic order.
	OutboxStats(ctx context.Context) ([]OutboxTopicStats, error)
}

// OutboxClaimRequest asks ClaimOutbox for messages.
type OutboxClaimRequest struct {
	N     int           // at most this many
	Owner string        // the claiming relay (idemstore.Owner() and a name)
	Now   time.Time     // the relay's clock (a store on its own clock takes Lease from its own now)
	Lease time.Duration // how long the claim holds; each record's LeaseUntil is on the relay's clock

	// Run, above 1, lets a store that implements [OutboxReleaser] take
	// with a topic's first pending message the ones right after it, up to
	// Run messages of the topic in all (and N in all), each pending, due
	// and not leased, stopping at the first that is not: a run of the
	// topic in Seq order, handed to one relay, so that a topic's messages
	// need not cost a claim each. The relay hands a run out in Seq order
	// and stops at the first message that does not end delivered or
	// parked, giving the rest back with ReleaseOutbox. 0 or 1: only the
	// first pending message of each topic (a store without ReleaseOutbox
	// ignores Run; one with it may, and take only the heads).
	Run int
}

// OutboxReleaser is an [OutboxStore] that can give back the claims that
// were never handed out: the rest of a topic's run (its ClaimOutbox may
// take runs, OutboxClaimRequest.Run), and the messages of a batch a
// relay did not hand out before it stopped.
type OutboxReleaser interface {
	OutboxStore
	// ReleaseOutbox gives back each message's claim token, as if it had
	// never been taken: its lease released (due at once, as it was) and
	// its Attempts back to what they were. Fenced as DeliveredOutbox; a
	// message whose latest claim is no longer its token is left as it is
	// (no error).
	ReleaseOutbox(ctx context.Context, claims []OutboxClaimed) error
}

// OutboxClaimed names one claim of a message: its id and claim token.
type OutboxClaimed struct {
	ID    string
	Token int64
}

// OutboxFailure is how a delivery failed, for FailOutbox.
type OutboxFailure struct {
	Now       time.Time
	NotBefore time.Time // not parked: the next attempt's earliest time
	Park      bool      // give up: the message is parked
	Error     string    // what went wrong, for people
}

// OutboxFilter selects messages for ListOutbox. Zero fields match
// everything.
type OutboxFilter struct {
	Topic  string
	Status OutboxStatus
	ID     string
	Limit  int // at most this many; 0 for all
}

// OutboxTopicStats counts one topic's messages.
type OutboxTopicStats struct {
	Topic     string
	Backlog   int64     // pending messages (due, backing off or leased)
	Oldest    time.Time // Created of the oldest pending message; zero when none
	Delivered int64     // delivered and not pruned yet
	Failed    int64     // pending with at least one failed attempt
	Parked    int64
}
