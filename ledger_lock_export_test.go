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
