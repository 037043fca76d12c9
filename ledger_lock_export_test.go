package idem

// LedgerLockWaiters returns how many writes of l wait for the write lock
// now (queued in this process or polling SQLite).
func LedgerLockWaiters(l *Ledger) int { return int(l.wl.waiters.Load()) }
