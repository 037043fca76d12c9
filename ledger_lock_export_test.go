package idem

import "context"

// LedgerLockBlocked returns how many writes of l found the database locked
// by another handle and wait for SQLite's lock now.
func LedgerLockBlocked(l *Ledger) int { return int(l.wl.blocked.Load()) }

// LedgerKeptSynchronous is PRAGMA synchronous of the connection l keeps
// for its writes (1 NORMAL, 2 FULL; 0 when it keeps none yet), read under
// the write lock.
func LedgerKeptSynchronous(l *Ledger) (int, error) {
	l.wl.sem <- struct{}{}
	defer l.wl.release()
	w := l.wconns[0]
	if w == nil {
		return 0, nil
	}
	var v int
	err := w.conn.QueryRowContext(context.Background(), `PRAGMA synchronous`).Scan(&v)
	return v, err
}

// LedgerReadsFirst reports whether l's next claim reads the key's status
// before any write (else it tries the claim's transaction first).
func LedgerReadsFirst(l *Ledger) bool { return l.readFirst() }

// LedgerQueueBatch is how many writes of a process one turn in a ledger's
// write queue covers at most.
const LedgerQueueBatch = queueBatch

// LedgerHoldWrites takes l's turn to write in this process, as a write of
// its own would (not its turn in the write queue), until the returned
// function is called: the ledger's writes meanwhile wait in its group.
func LedgerHoldWrites(l *Ledger) (release func()) {
	l.wl.sem <- struct{}{}
	return func() { <-l.wl.sem }
}

// LedgerGroupPending is how many writes wait in l's group (the one that
// will lead them included).
func LedgerGroupPending(l *Ledger) int {
	l.group.mu.Lock()
	defer l.group.mu.Unlock()
	return len(l.group.pending)
}

// LedgerOwnWrite runs f as one of the ledger's own write transactions
// (writeTx), which may share a commit with others; exec runs a statement
// in it.
func LedgerOwnWrite(ctx context.Context, l *Ledger, durable bool, f func(exec func(q string, args ...any) error) error) error {
	return l.writeTx(ctx, durable, false, func(tx *wtx) error {
		return f(func(q string, args ...any) error {
			_, err := tx.exec(q, args...)
			return err
		})
	})
}

// SetBatchHook makes every batched statement of the ledgers' groups call
// fn with its number of rows, until the returned function is called.
// (Tests that set it do not run in parallel.)
func SetBatchHook(fn func(rows int)) (reset func()) {
	testHookBatch.Store(&fn)
	return func() { testHookBatch.Store(nil) }
}
