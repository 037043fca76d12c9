// Package redisstore is an idem store in Redis: for teams whose shared
// state is Redis, with the same promises as idem's other stores, proven by
// the same conformance suite (package idemtest).
//
//	s, err := redisstore.Open(ctx, "redis://cache:6379/0") // or redisstore.New(ctx, yourClient)
//	err = s.Run(ctx, key, func(ctx context.Context) error { ... })
//
// # Leases and fencing
//
// Every state change is one Lua script, atomic on the server: a claim
// reads the key's record and, when the key is free, takes it in the same
// step for the next attempt number (HINCRBY of the record's attempt
// field: the fencing token, never reused), with its owner and a lease that
// ends at the server's time (TIME, inside the script) plus the lease.
// Renew, Finish and the done mark are fenced by the attempt: a holder that
// stalled past its lease and was taken over gets [idem.ErrLeaseLost], and
// its late done mark changes nothing. Leases and backoff deadlines are
// judged by the Redis server's clock alone, never by the clients': hosts
// whose clocks disagree still agree on when a lease has expired. Done
// marks have no TTL; they stay until [Store.Prune] removes them, and a
// pruned period stays done (the job's horizon covers it).
//
// # Durability
//
// A done mark is only as durable as the server's append-only file. [New]
// and [Open] read CONFIG GET appendonly and appendfsync and refuse a
// server without appendonly yes and appendfsync always (with
// [ErrWeakDurability]) unless [AllowWeakDurability] says what the caller
// accepts to lose; they refuse a replica always. The check is made once,
// at open: a server reconfigured later is not noticed.
//
// Replication does not change this: a Redis replica receives writes after
// the primary acknowledged them. When Sentinel or Redis Cluster promotes a
// replica after the primary fails, the writes it had not yet received are
// gone: a done mark (the key runs again: AtLeastOnce's promise holds, the
// effect may repeat), or a claim (AtMostOnce and TwoPhase may then run an
// effect again without the doubt that would have stopped or checked it).
// idem promises at most once and two-phase recovery on a Redis deployment
// only as long as no acknowledged write is lost; this store does not wait
// for replicas (WAIT).
//
// # Keys
//
// Every key of a store begins with "{prefix}:" ([DefaultPrefix] "idem",
// or [WithPrefix]); the braces make the prefix the keys' hash tag, so a
// Redis Cluster keeps a store in one slot, as its scripts touching several
// keys need:
//
//	{p}:meta                       hash: version (the layout version, LayoutVersion),
//	                               wake_counter (the last wake mark's number)
//	{p}:wakes                      sorted set: the jobs ever woken (a reset, resolve or
//	                               re-run request: idemstore.Waker), each scored with
//	                               the counter when it was last woken
//	{p}:run:<n>:<job>:<period>     hash: one record (n is the job's length in bytes):
//	                               status, attempt, failures, owner, lease_until,
//	                               not_before, last_error, created, updated,
//	                               fingerprint (idem.WithParams), value (stored
//	                               with the done mark; absent for none),
//	                               ended_by (the attempt whose Finish wrote the
//	                               end, so that the same end re-sent succeeds),
//	                               revision (re-runs of the period: idem.Rerun),
//	                               rerun_pending (the revision a running attempt's
//	                               done mark gives the period), revised_after (the
//	                               attempt whose done mark a re-run followed)
//	                               (times in microseconds since the Unix epoch,
//	                               on the server's clock)
//	{p}:periods:<job>              sorted set (score 0): the job's periods that have a record
//	{p}:rerun:<n>:<job>:<period>   hash: the period's re-run requests: field the
//	                               request id, value JSON {revision, state (queued,
//	                               pending), reason, by, requested (µs)}
//	{p}:reruns:<job>               sorted set (score 0): the job's periods with re-run requests
//	{p}:job:<job>                  hash: cursor, horizon (catch-up and Prune)
//	{p}:jobs                       sorted set (score 0): the jobs, for List
//	{p}:limit:rate:<name>          string: a rate limit's theoretical arrival time
//	                               (package limit; it expires once passed)
//	{p}:limit:slots:<name>         hash: an "at once" limit's held places (package
//	                               limit): field the place's number, value
//	                               <lease end µs>|<token's length>|<token><owner>
//
// Periods are compared as byte strings, as Go compares strings. Prune and
// List run as one script each, reading the records they cover: the server
// serves nothing else meanwhile.
//
// # What it is not
//
// The store is not an idemstore.TxStore (Redis holds no business data to
// commit with a done mark) nor an idemstore.ItemStore: idem.Each and
// EachTx do not take it.
package redisstore
