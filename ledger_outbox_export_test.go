package idem

// LedgerOutboxClaimSQL is every statement of the SQLite ledger's outbox
// claim, by name: "due" and "heads" (?1: now, ?2: a limit), "claim" (the
// same, ?3: an owner, ?4: the lease's end), "next" (?1: a topic, ?2: a
// seq, ?3: a limit).
var LedgerOutboxClaimSQL = map[string]string{
	"due":   outboxDueSQL,
	"heads": outboxHeadsSQL,
	"claim": outboxClaimHeadsSQL,
	"next":  outboxNextSQL,
}
