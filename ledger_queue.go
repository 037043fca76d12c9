package idem

import "context"

// The write queue of an owned ledger (OpenLedger) serves the writes of the
// processes of a host in the order they asked for the write lock. SQLite's
// own wait for its write lock is a busy handler that sleeps and tries
// again: a writer that commits and begins again at once finds the lock
// free, and a sleeping one keeps missing the short gaps between its
// commits, for seconds. So each write first takes a number in a queue kept
// in a file beside the ledger, <ledger>-lock, and begins its SQLite
// transaction when every write that took a number before it has ended.
//
// On Linux (ledger_queue_linux.go) the queue is made of open file
// description locks (fcntl F_OFD_SETLK), which the kernel drops when the
// file is closed or its process dies: under a short lock on the file's
// first byte a write reads the next number from the file, writes it
// back plus one and locks the byte of its number; then it waits (a
// blocking lock of the bytes of all lower numbers) until no lower number's
// byte is locked: the writes before it ended, or their processes died. A
// number taken by a process killed before its turn holds nobody up, and a
// write that stops waiting (WithLockWait, its context) leaves its number
// to the next write of its Ledger, or gives its turn back at once when
// that comes first.
//
// The queue orders the writes of every Ledger opened with OpenLedger on
// the file, in this and other processes. Writers that do not take a number
// (another program, the sqlite3 shell, an older idem, a Ledger attached
// with NewLedger) still exclude each other through SQLite's lock, as before:
// a write whose turn came waits for that lock as it always did
// (lockWait). Elsewhere than on Linux, and when the lock file cannot be
// opened for writing, there is no queue: writes wait in SQLite's busy
// handler, as before.

// queueTurn waits for the ledger's turn in the write queue (the caller
// holds this process's turn, wl.sem), at most until ls.deadline or ctx's
// end; with now it does not wait (errNotNow). release gives the turn back.
func (wl *writeLock) queueTurn(ctx context.Context, ls *lockStart, now bool) error {
	if wl.q == nil {
		return nil
	}
	waited, err := wl.q.turn(ctx, ls.real, ls.deadline, now)
	ls.waited = ls.waited || waited
	return err
}
