//go:build linux

package idem

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// The lock file's layout: the next number at bytes 0-7 (little endian; a
// file shorter than that is at 0), the header lock on byte 0, every open
// handle's shared lock on byte queueUsers (the last one to close removes
// the file, as SQLite removes -wal and -shm), and number t's lock on byte
// queueSlots+t. Locks may lie past the end of a file.
const (
	queueHeader = 0
	queueUsers  = 1
	queueSlots  = 1 << 32
	// queueMaxTicket: a number read past it (a file someone wrote into)
	// starts again at 0.
	queueMaxTicket = 1 << 60
)

// writeQueue is an owned ledger's place in the queue of writers of its
// file (see ledger_queue.go). Its turn is taken and given back under the
// ledger's write lock (writeLock.sem), which it serves: held is this
// handle's turn; mu guards what a wait that was given up (pending) shares
// with its goroutine.
type writeQueue struct {
	path   string
	ledger os.FileInfo // the ledger's file: the lock file gets its permissions and owner
	held   bool
	ahead  bool // this write went ahead without a number: the queue was empty (see turn)

	mu      sync.Mutex
	k       *keptFile // the open lock file
	pending *queueWait
	closed  bool
}

// queueWait is a wait for a turn in a goroutine of its own (a blocking
// fcntl cannot be interrupted): once done, err says whether the turn came.
// A wait given up (abandoned) is kept for the Ledger's next write, whose
// number it already has; if it ends before one comes, it gives the turn
// back at once.
type queueWait struct {
	done      chan struct{}
	err       error
	abandoned bool
}

// openWriteQueue opens (creating it) the lock file of the ledger at path,
// whose file is ledger; nil when it cannot be opened for writing (the
// writes then wait in SQLite's busy handler, as without a queue).
func openWriteQueue(path string, ledger os.FileInfo) *writeQueue {
	q := &writeQueue{path: path + "-lock", ledger: ledger}
	k, err := q.open()
	if err != nil {
		return nil
	}
	q.k = k
	return q
}

// open opens the lock file, creating it with the ledger file's permissions
// (and, for root, its owner), as SQLite creates -wal and -shm.
func (q *writeQueue) open() (*keptFile, error) {
	f, err := os.OpenFile(q.path, os.O_RDWR|os.O_CREATE|os.O_EXCL, q.ledger.Mode().Perm())
	if err == nil {
		_ = f.Chmod(q.ledger.Mode().Perm()) // the umask may have taken bits away
		if st, ok := q.ledger.Sys().(*syscall.Stat_t); ok && os.Geteuid() == 0 {
			_ = f.Chown(int(st.Uid), int(st.Gid))
		}
	} else if errors.Is(err, os.ErrExist) {
		f, err = os.OpenFile(q.path, os.O_RDWR, 0)
	}
	if err != nil {
		return nil, err
	}
	k, err := keep(f)
	if err != nil {
		return nil, err
	}
	if _, err := k.ofdLock(unix.F_OFD_SETLKW, unix.F_RDLCK, queueUsers, 1); err != nil {
		k.f.Close()
		return nil, err
	}
	return k, nil
}

// turn waits for the handle's turn, at most until deadline or ctx's end
// (start is when the write began to wait: the error says how long it
// waited); waited says whether it found writes ahead of it. With now, it
// does not wait: errNotNow, with no number kept.
//
// When nobody is in the queue (no number's byte locked, on the lock file
// at the path), the write takes no number and goes to SQLite's lock at
// once (ahead): a number costs about eight system calls, this check two,
// on every write of a ledger that one process writes. A write that went
// ahead and finds SQLite's lock held takes its number then (join), so
// that the writer holding it, whose next write finds that number's byte
// locked, queues behind it, as every later write does.
func (q *writeQueue) turn(ctx context.Context, start, deadline time.Time, now bool) (waited bool, err error) {
	q.ahead = false
	if q.empty() {
		q.ahead = true
		return false, nil
	}
	return q.queued(ctx, start, deadline, now)
}

// empty reports whether no write of any handle holds a number or waits
// with one (and this handle has no wait under way), on the lock file that
// is still at the path.
func (q *writeQueue) empty() bool {
	q.mu.Lock()
	k, p := q.k, q.pending
	q.mu.Unlock()
	if p != nil {
		return false
	}
	free, err := k.ofdFree(queueSlots)
	return err == nil && free && k.linked()
}

// join takes a number for a write that went ahead (see turn) and found
// SQLite's write lock held, and waits for its turn like any write.
func (q *writeQueue) join(ctx context.Context, start, deadline time.Time) error {
	if !q.ahead {
		return nil
	}
	q.ahead = false
	_, err := q.queued(ctx, start, deadline, false)
	return err
}

// queued is turn with a number.
func (q *writeQueue) queued(ctx context.Context, start, deadline time.Time, now bool) (waited bool, err error) {
	q.mu.Lock()
	p := q.pending
	if p != nil && !now {
		p.abandoned = false // this write waits on with the number it has
	}
	q.mu.Unlock()
	if p != nil && now {
		return true, errNotNow
	}
	if p == nil {
		k, t, ok, err := q.take(false, now)
		if err != nil {
			return false, err
		}
		if ok {
			head, err := k.ofdLock(unix.F_OFD_SETLK, unix.F_RDLCK, queueSlots, t)
			if err != nil || head {
				if err != nil {
					k.ofdUnlockFrom(queueSlots)
				} else {
					q.held = true
				}
				return false, err
			}
		} else if now {
			return true, errNotNow
		}
		p = q.wait(k, t, ok)
	}
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	var why error
	select {
	case <-p.done:
	case <-ctx.Done():
		why = fmt.Errorf("%w (while waiting for the ledger's write queue)", context.Cause(ctx))
	case <-timer.C:
		why = lockHeld(time.Since(start), nil)
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	select {
	case <-p.done:
		q.pending = nil
		if p.err == nil {
			q.held = true
		}
		return true, p.err
	default:
		p.abandoned = true
		return true, why
	}
}

// wait starts the wait for the turn of number t taken on k (with taken
// false, the header lock was held by another: the number is taken in the
// goroutine, waiting for that lock).
func (q *writeQueue) wait(k *keptFile, t int64, taken bool) *queueWait {
	p := &queueWait{done: make(chan struct{})}
	q.mu.Lock()
	q.pending = p
	q.mu.Unlock()
	go func() {
		var err error
		if !taken {
			k, t, _, err = q.take(true, false)
		}
		if err == nil {
			_, err = k.ofdLock(unix.F_OFD_SETLKW, unix.F_RDLCK, queueSlots, t)
			if err != nil {
				k.ofdUnlockFrom(queueSlots)
			}
		}
		q.mu.Lock()
		defer q.mu.Unlock()
		p.err = err
		if p.abandoned {
			q.pending = nil
			if err == nil && !q.closed {
				k.ofdUnlockFrom(queueSlots) // nobody came for the turn: give it back
			}
		}
		close(p.done)
	}()
	return p
}

// take takes the next number t under the header lock, on the lock file k,
// and locks its byte; with block false, ok is false when another holds the
// header lock; with now, it is false when a number's byte is locked (a
// write is in its turn or waits for it), and no number is taken. The
// header lock counts only while the file it was taken on still has a name
// (removed, or replaced by a rename, it has none: linked): such a lock
// file is opened anew at the path (keptTries times at most).
func (q *writeQueue) take(block, now bool) (k *keptFile, t int64, ok bool, err error) {
	cmd := unix.F_OFD_SETLK
	if block {
		cmd = unix.F_OFD_SETLKW
	}
	for range keptTries {
		q.mu.Lock()
		k = q.k
		q.mu.Unlock()
		got, err := k.ofdLock(cmd, unix.F_WRLCK, queueHeader, 1)
		if err != nil || !got {
			return k, 0, false, err
		}
		if k.linked() {
			if now {
				if free, err := k.ofdFree(queueSlots); err != nil || !free {
					k.ofdUnlock(queueHeader, 1)
					return k, 0, false, err
				}
			}
			t, err = k.ticket()
			k.ofdUnlock(queueHeader, 1)
			return k, t, err == nil, err
		}
		k.ofdUnlock(queueHeader, 1)
		if err := q.reopen(k); err != nil {
			return k, 0, false, err
		}
	}
	return k, 0, false, fmt.Errorf("idem: ledger lock file %s: removed or replaced each time it was locked", q.path)
}

// reopen replaces the lock file old, found removed or replaced, with the
// file now at the path.
func (q *writeQueue) reopen(old *keptFile) error {
	k, err := q.open()
	if err != nil {
		return fmt.Errorf("idem: ledger lock file %s: %w", q.path, err)
	}
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		k.f.Close()
		return os.ErrClosed
	}
	if q.k == old {
		q.k = k
		k = old
	}
	q.mu.Unlock()
	k.f.Close()
	return nil
}

// holding reports whether the handle holds its turn.
func (q *writeQueue) holding() bool { return q.held }

// leave gives the handle's turn back, if it holds it.
func (q *writeQueue) leave() {
	if !q.held {
		return
	}
	q.held = false
	q.mu.Lock()
	k := q.k
	q.mu.Unlock()
	k.ofdUnlockFrom(queueSlots)
}

// close closes the lock file, which releases every lock on it (once a
// wait still under way in its goroutine returns), and removes it if no
// other handle has it open. (One that opened it just now finds it removed
// as it takes a number, and opens the path anew: see take.)
func (q *writeQueue) close() {
	q.mu.Lock()
	q.closed = true
	k := q.k
	last := q.pending == nil
	q.mu.Unlock()
	if last {
		if alone, err := k.ofdLock(unix.F_OFD_SETLK, unix.F_WRLCK, queueUsers, 1); err == nil && alone && k.stillAt() {
			_ = os.Remove(q.path)
		}
	}
	k.f.Close()
}

// ticket reads the next number, writes it back plus one and locks its
// byte; the caller holds the header lock.
func (k *keptFile) ticket() (int64, error) {
	var b [8]byte
	n, err := k.f.ReadAt(b[:], 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return 0, err
	}
	t := int64(binary.LittleEndian.Uint64(b[:]))
	if n < len(b) || t < 0 || t > queueMaxTicket {
		t = 0
	}
	binary.LittleEndian.PutUint64(b[:], uint64(t+1))
	if _, err := k.f.WriteAt(b[:], 0); err != nil {
		return 0, err
	}
	if _, err := k.ofdLock(unix.F_OFD_SETLK, unix.F_WRLCK, queueSlots+t, 1); err != nil {
		return 0, err
	}
	return t, nil
}

// linked reports whether k's file still has a name (fstat's link count:
// no path to stat, no allocation, on every write).
func (k *keptFile) linked() bool {
	var st unix.Stat_t
	return unix.Fstat(int(k.f.Fd()), &st) == nil && st.Nlink > 0
}

// ofdLock locks n bytes from start (n 0: none, at once) with fcntl cmd
// (F_OFD_SETLK, or F_OFD_SETLKW to wait); ok is false when F_OFD_SETLK
// found a conflicting lock.
func (k *keptFile) ofdLock(cmd int, typ int16, start, n int64) (ok bool, err error) {
	if n == 0 {
		return true, nil
	}
	lk := unix.Flock_t{Type: typ, Whence: io.SeekStart, Start: start, Len: n}
	ferr := k.fcntl(cmd, &lk)
	switch {
	case ferr == nil:
		return true, nil
	case cmd == unix.F_OFD_SETLK && (ferr == unix.EAGAIN || ferr == unix.EACCES):
		return false, nil
	}
	return false, fmt.Errorf("idem: ledger lock file %s: fcntl: %w", k.f.Name(), ferr)
}

// fcntl runs fcntl(cmd, lk) on k's file. A call that does not wait uses
// its descriptor as it is: the callers (under the ledger's write lock, or
// a wait's goroutine under writeQueue.mu with the file not closed) keep
// Close from closing it meanwhile. A wait (F_OFD_SETLKW) may outlast the
// Ledger's Close: it holds the file open through SyscallConn, so that its
// descriptor cannot be closed, and its number given to another file, under
// it.
func (k *keptFile) fcntl(cmd int, lk *unix.Flock_t) error {
	if cmd != unix.F_OFD_SETLKW {
		return unix.FcntlFlock(k.f.Fd(), cmd, lk)
	}
	rc, err := k.f.SyscallConn()
	if err != nil {
		return err
	}
	var ferr error
	if err := rc.Control(func(fd uintptr) {
		for {
			ferr = unix.FcntlFlock(fd, cmd, lk)
			if ferr != unix.EINTR {
				return
			}
		}
	}); err != nil {
		return err
	}
	return ferr
}

// ofdFree reports whether no other open file holds a lock on a byte from
// start on.
func (k *keptFile) ofdFree(start int64) (bool, error) {
	lk := unix.Flock_t{Type: unix.F_WRLCK, Whence: io.SeekStart, Start: start}
	if err := k.fcntl(unix.F_OFD_GETLK, &lk); err != nil {
		return false, fmt.Errorf("idem: ledger lock file %s: fcntl: %w", k.f.Name(), err)
	}
	return lk.Type == unix.F_UNLCK, nil
}

// ofdUnlock releases n bytes from start (0: to the end of every file).
func (k *keptFile) ofdUnlock(start, n int64) {
	lk := unix.Flock_t{Type: unix.F_UNLCK, Whence: io.SeekStart, Start: start, Len: n}
	_ = k.fcntl(unix.F_OFD_SETLK, &lk)
}

// ofdUnlockFrom releases every byte from start on.
func (k *keptFile) ofdUnlockFrom(start int64) { k.ofdUnlock(start, 0) }
