package idem

import (
	"context"
	"sync"
)

// The write queue of an owned ledger (OpenLedger) serves the writes of the
// processes of a host in the order they asked for the write lock. SQLite's
// own wait for its write lock is a busy handler that sleeps and tries
// again: a writer that commits and begins again at once finds the lock
// free, and a sleeping one keeps missing the short gaps between its
// commits, for seconds. So a write takes a number in a queue kept in a
// file beside the ledger, <ledger>-lock, and begins its SQLite transaction
// when every write that took a number before it has ended. A write that
// finds the queue empty takes no number and begins at once; if SQLite's
// lock is held, it takes its number then (see writeQueue.turn): a ledger
// written by one process pays two system calls a write for the queue, not
// eight, and a waiting writer is passed by at most the write that held the
// lock when it came.
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

// queueBatch is how many writes of a process one turn in the write queue
// covers at most: when a write ends and other writes of its Ledger wait
// for their turn in this process (writeLock.sem), the turn passes to the
// next of them, queueBatch-1 times, before it goes to the next process in
// the queue. Each hand-over to another process costs a wake-up of that
// process (on a busy machine, a wait for a CPU); a batch pays it once for
// several writes. A write therefore waits behind at most queueBatch writes
// of each Ledger ahead of it in the queue.
const queueBatch = 4

// queueState is what a writeLock keeps of its turn in the write queue,
// under mu.
type queueState struct {
	mu      sync.Mutex
	waiters int  // writes waiting for this process's turn (acquire)
	kept    bool // the turn in the queue is kept for the next write of this process
	batch   int  // writes the turn has covered, less one
}

// queueTurn waits for the ledger's turn in the write queue (the caller
// holds this process's turn, wl.sem), at most until ls.deadline or ctx's
// end; with now it does not wait (errNotNow). A turn kept by the write
// before it is taken at once. release gives the turn back.
func (wl *writeLock) queueTurn(ctx context.Context, ls *lockStart, now bool) error {
	if wl.q == nil {
		return nil
	}
	s := &wl.qs
	s.mu.Lock()
	kept := s.kept
	s.kept = false
	s.mu.Unlock()
	if kept {
		return nil
	}
	waited, err := wl.q.turn(ctx, ls.real, ls.deadline, now)
	ls.waited = ls.waited || waited
	return err
}

// joinQueue is called by a write that found SQLite's write lock held: if
// it went ahead of the queue without a number (the queue was empty: see
// writeQueue.turn), it takes one now and waits for its turn.
func (wl *writeLock) joinQueue(ctx context.Context, ls *lockStart) error {
	if wl.q == nil {
		return nil
	}
	return wl.q.join(ctx, ls.real, ls.deadline)
}

// releaseTurn gives this process's turn (wl.sem) back, and its turn in the
// write queue, or keeps that for the next write waiting in this process
// (see queueBatch).
func (wl *writeLock) releaseTurn() {
	s := &wl.qs
	s.mu.Lock()
	defer s.mu.Unlock()
	if wl.q.holding() {
		if s.waiters > 0 && s.batch < queueBatch-1 {
			s.batch++
			s.kept = true
		} else {
			s.batch, s.kept = 0, false
			wl.q.leave()
		}
	}
	<-wl.sem
}

// waiting counts a write that waits for this process's turn (n 1), or
// that got it (n -1).
func (wl *writeLock) waiting(n int) {
	wl.qs.mu.Lock()
	wl.qs.waiters += n
	wl.qs.mu.Unlock()
}

// gaveUp is waiting(-1) for a write that stopped waiting (its context,
// WithLockWait): if the turn in the queue was kept for the writes waiting
// here and none is left, it is given back.
func (wl *writeLock) gaveUp() {
	s := &wl.qs
	s.mu.Lock()
	defer s.mu.Unlock()
	s.waiters--
	if s.kept && s.waiters == 0 && wl.tryAcquire() {
		s.batch, s.kept = 0, false
		wl.q.leave()
		<-wl.sem
	}
}
