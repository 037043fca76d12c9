package idem

// LedgerLockBlocked returns how many writes of l found the database locked
// by another handle and wait for SQLite's lock now.
func LedgerLockBlocked(l *Ledger) int { return int(l.wl.blocked.Load()) }
