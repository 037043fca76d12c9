package idem

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"time"
)

// Group commit. The writes of an owned ledger's own (claims, lease
// renewals, done marks, outbox claims and ends, ...: writeTx) that come
// while another of them holds the write lock do not each wait for the lock
// and commit on their own: they queue in the ledger's group (pending), and
// the write that holds the lock next (the leader) runs every write queued
// at that moment in one SQLite transaction, each in a savepoint of its own
// (or, a new key's claim and a done mark, with others of its kind in one
// statement: ledger_batch.go), and commits them together: one COMMIT, so one fsync of the -wal file,
// for the lot. A write whose statements fail is rolled back to its
// savepoint alone and returns its error; the others commit. A COMMIT that
// fails (a failed fsync, a full disk) fails every write of the group, none
// of which is then reported done. The commit is synced (synchronous=FULL)
// when the writes ask for it. A group that mixes writes needing no sync
// (an AtLeastOnce claim) with durable ones (a done mark) commits in two,
// one after the other under the same lock: the former first, unsynced,
// answered when their COMMIT returns, so their callers go on to their
// work during the other commit's fsync; then the durable ones, synced.
//
// Before its COMMIT, each of those transactions also takes the writes of
// its kind (synced or not) that joined the group while it ran its
// statements (late): the callers the last commit answered are often back
// by then with their next write (an AtLeastOnce claim's caller with its
// done mark), which then shares this commit instead of waiting for the
// next one, behind its fsync. And a leader that has answered other
// callers yields its thread before it goes on, so that they can come back
// with their next writes in time to join it.
//
// A write returns once its group's COMMIT (and, for a synced one, the
// directory sync of the -wal file) has returned: a done mark is reported
// only once it is durable, as without groups. A write waiting in the group
// gives up as it gives up waiting for the lock (its context, WithLockWait)
// while no leader has taken it; once taken, it waits for the group's end
// (a few statements of the ledger's own, and a commit).
//
// The transactions that run a caller's function (RunTx's, EachTx's,
// outbox.Put's: sqlTx) are not grouped: the caller's statements would
// share a transaction with other calls' writes, and its failure or its
// panic would be theirs.
//
// NOT promised: a group of a given size (a write alone, or whose lock is
// free, commits alone at once; groups form only while a commit is under
// way), or an order between writes in flight together: one transaction
// runs its writes in the order they came, but a late write may commit
// before a write of the other kind that came earlier.

// maxGroup is the most writes one group commits together.
const maxGroup = 64

// groupCommit is an owned ledger's group of waiting writes, under mu.
type groupCommit struct {
	mu      sync.Mutex
	pending []*groupWrite // in the order they came
	leading bool          // a write leads (holds or is taking the write lock)
}

// groupWrite is one write of the ledger's own, waiting in the group, led,
// or done.
type groupWrite struct {
	ctx     context.Context
	durable bool
	now     bool // fail with errNotNow rather than wait for SQLite's lock
	f       func(*wtx) error
	b       *batchRow // non-nil: it may run with others of its kind in one statement (ledger_batch.go)
	ls      *lockStart

	wake chan struct{} // cap 1: done, or chosen to lead (lead)
	lead bool          // under mu: chosen to lead the next group
	done bool          // under mu: err is its answer
	err  error
}

// groupTx is writeTx's path on an owned ledger: the write joins the group,
// leads it if no write does, and returns once a group that holds it has
// committed (or failed).
func (l *Ledger) groupTx(ctx context.Context, durable, now bool, f func(*wtx) error, b *batchRow) error {
	if now && l.wl.long.Load() > 0 {
		// A transaction of a caller's function holds this process's turn
		// or waits for it: see startWrite.
		return errNotNow
	}
	w := &groupWrite{ctx: ctx, durable: durable, now: now, f: f, b: b, ls: l.newLockStart(), wake: make(chan struct{}, 1)}
	g := &l.group
	g.mu.Lock()
	g.pending = append(g.pending, w)
	first := !g.leading
	if first {
		g.leading = true
		w.lead = true
	}
	g.mu.Unlock()
	if !first && !l.waitInGroup(w) {
		return w.err
	}
	// Chosen to lead: take the write lock, then the group.
	l.lead(w)
	return w.err
}

// waitInGroup waits until w is done (false) or chosen to lead (true), or
// gives up while it is still pending (its context, WithLockWait: false,
// with w.err set).
func (l *Ledger) waitInGroup(w *groupWrite) (lead bool) {
	t := time.NewTimer(time.Until(w.ls.deadline))
	defer t.Stop()
	for {
		var gaveUp error
		select {
		case <-w.wake:
		case <-w.ctx.Done():
			gaveUp = context.Cause(w.ctx)
		case <-t.C:
			gaveUp = lockHeld(time.Since(w.ls.real), nil)
		}
		g := &l.group
		g.mu.Lock()
		switch {
		case w.done:
			g.mu.Unlock()
			return false
		case w.lead && gaveUp == nil:
			g.mu.Unlock()
			return true
		case w.lead:
			// Chosen to lead as it gave up: the lead goes on.
			g.remove(w)
			g.handOff()
			g.mu.Unlock()
			w.err = gaveUp
			return false
		case gaveUp != nil:
			if i := indexOf(g.pending, w); i >= 0 {
				g.remove(w)
				g.mu.Unlock()
				w.err = gaveUp
				return false
			}
			// Taken by a leader already: its group ends soon.
			g.mu.Unlock()
			<-w.wake
			g.mu.Lock()
			lead = w.lead && !w.done
			g.mu.Unlock()
			return lead
		default:
			g.mu.Unlock()
		}
	}
}

func indexOf(ws []*groupWrite, w *groupWrite) int {
	for i, x := range ws {
		if x == w {
			return i
		}
	}
	return -1
}

// lead takes the write lock for w's group (w is pending[0]), runs the
// writes pending then as one transaction, answers them, and hands the lead
// to the first write left pending.
func (l *Ledger) lead(w *groupWrite) {
	g := &l.group
	var batch []*groupWrite
	defer func() { // also when a write panics: no write is left waiting
		g.mu.Lock()
		for _, x := range batch {
			if !x.done {
				x.done = true
				if x.err == nil {
					x.err = errors.New("idem: ledger write ended without an answer")
				}
				x.signal()
			}
		}
		g.remove(w) // w never got the lock
		g.handOff()
		g.mu.Unlock()
	}()
	ls, err := l.startWrite(w.ctx, w.now, 0)
	if err != nil {
		w.err = err
		return
	}
	defer l.wl.release()
	ls.real, ls.clock, ls.deadline = w.ls.real, w.ls.clock, w.ls.deadline
	ls.waited = ls.waited || w.ls.waited
	w.ls = ls
	g.mu.Lock()
	n := min(len(g.pending), maxGroup)
	batch = append([]*groupWrite(nil), g.pending[:n]...)
	g.pending = append(g.pending[:0], g.pending[n:]...)
	g.mu.Unlock()
	for _, x := range batch[1:] {
		x.ls.waited = true // it waited behind the group before
	}
	head := w
	for round := 1; ; round++ {
		var again []*groupWrite
		for _, part := range splitDurable(head, batch) {
			if len(again) > 0 {
				// The lock was not to be had now: the rest waits too.
				again = append(again, part.writes...)
				continue
			}
			var err error
			part.writes, err = l.runGroup(part.head, part.writes, &batch)
			answered := false
			g.mu.Lock()
			for _, x := range part.writes {
				switch {
				case errors.Is(err, errNotNow) && !x.now:
					// The leader would not wait for SQLite's lock; this
					// write would: it goes back to the front of the group.
					again = append(again, x)
					continue
				case err != nil:
					x.err = err
				}
				x.done = true
				if x != w {
					x.signal()
					answered = true
				}
			}
			g.mu.Unlock()
			if answered {
				// The callers just answered are runnable on this
				// thread's queue, most about to come back with their
				// next write (a claim's caller with its done mark, a
				// done mark's with its next claim). Let them run to it
				// before the next part or group is taken, so that it
				// joins them rather than the group after. 16 goroutines
				// doing fresh Runs: about 40% fewer synced commits, 7-10%
				// more Runs a second (BENCHMARKS.md).
				runtime.Gosched()
			}
		}
		g.mu.Lock()
		g.pending = append(again, g.pending...)
		batch = nil
		// The writes that came during this group's commit: this leader
		// commits them too, holding the lock (no hand-over to wake), up
		// to maxRounds groups in all; then the lock goes round.
		if len(again) > 0 || round == maxRounds || len(g.pending) == 0 {
			g.mu.Unlock()
			return
		}
		n := min(len(g.pending), maxGroup)
		batch = append([]*groupWrite(nil), g.pending[:n]...)
		g.pending = append(g.pending[:0], g.pending[n:]...)
		g.mu.Unlock()
		head = batch[0]
		for _, x := range batch {
			x.ls.waited = true
			if !x.now {
				head = x // a write that waits for SQLite's lock, if any, leads
			}
		}
	}
}

// groupPart is the writes of a group committed together, led by head.
type groupPart struct {
	head   *groupWrite
	writes []*groupWrite
}

// splitDurable splits batch (led by head) in two commits when it mixes
// writes that need no sync with writes that do: those that need none
// first, answered as soon as their COMMIT returns, without waiting for
// the other commit's fsync (an AtLeastOnce claim's caller goes on to its
// work, and its done mark may join the group that forms meanwhile), then
// the durable ones, synced. Each part is led by head if it holds it, else
// by a write that waits for SQLite's lock, if any.
func splitDurable(head *groupWrite, batch []*groupWrite) []groupPart {
	var loose, durable []*groupWrite
	for _, x := range batch {
		if x.durable {
			durable = append(durable, x)
		} else {
			loose = append(loose, x)
		}
	}
	if len(loose) == 0 || len(durable) == 0 {
		return []groupPart{{head, batch}}
	}
	lead := func(ws []*groupWrite) *groupWrite {
		h := ws[0]
		for _, x := range ws {
			if x == head {
				return x
			}
			if !x.now && h.now {
				h = x
			}
		}
		return h
	}
	return []groupPart{{lead(loose), loose}, {lead(durable), durable}}
}

// maxRounds is how many groups one leader commits, one after the other,
// while it holds the write lock (see lead).
const maxRounds = 4

// remove takes w out of the pending writes, if it is there (under mu).
func (g *groupCommit) remove(w *groupWrite) {
	if i := indexOf(g.pending, w); i >= 0 {
		g.pending = append(g.pending[:i], g.pending[i+1:]...)
	}
}

// handOff gives the lead to the first pending write, or ends it when none
// is left (under mu).
func (g *groupCommit) handOff() {
	if len(g.pending) == 0 {
		g.leading = false
		return
	}
	next := g.pending[0]
	next.lead = true
	next.signal()
}

func (x *groupWrite) signal() {
	select {
	case x.wake <- struct{}{}:
	default:
	}
}

// runGroup runs batch (led by w, which holds the write lock) in one
// transaction on the kept connection: when there are several, each
// write's f in a savepoint, or with others of its kind in one statement
// (runWrites). Before the COMMIT, it takes the writes of batch's kind that
// joined the group meanwhile (late) and runs them too, the same way; it
// adds them to *taken (the leader's, which answers them if
// what follows panics) and returns batch with them. Each write's own error
// is set in its err; the error returned (the file check's, the BEGIN's,
// the COMMIT's, the sync's) is every write's.
func (l *Ledger) runGroup(w *groupWrite, batch []*groupWrite, taken *[]*groupWrite) ([]*groupWrite, error) {
	durable := false
	for _, x := range batch {
		durable = durable || x.durable
	}
	ctx := w.ctx
	if len(batch) > 1 {
		// The leader's context ending must not fail the others' commit.
		ctx = context.WithoutCancel(ctx)
	}
	const i = 0 // the kept connection of every write transaction: see wconn.setSync
	pool := l.db
	waiting := true // until the first try that gets the lock: locked reports the wait once
	err := l.writeErr(l.lockWait(ctx, w.ls, w.now, l.busyTimeout(i), func() error {
		// The path still names the ledger's file (ledgerConnector.check),
		// checked once for the group's transaction: every write of it is
		// refused if not, nothing written.
		if err := l.file.check(); err != nil {
			return err
		}
		c, err := l.writeConn(ctx, i, pool)
		if err != nil {
			return err
		}
		if err := c.setSync(ctx, durable); err != nil {
			c.close()
			l.wconns[i] = nil
			return err
		}
		if _, err := c.exec(ctx, `BEGIN IMMEDIATE`); err != nil {
			if !isBusy(err) { // a connection in an unknown state: take a new one next time
				c.close()
				l.wconns[i] = nil
			}
			return err
		}
		committed := false
		defer func() { // also when f panics
			if committed {
				return
			}
			if _, err := c.exec(context.WithoutCancel(ctx), `ROLLBACK`); err != nil {
				c.close()
				l.wconns[i] = nil
			}
		}()
		if waiting {
			waiting = false
			for _, x := range batch {
				l.locked(x.ctx, x.ls)
			}
		}
		if len(batch) == 1 {
			if err := w.f(l.groupWtx(c, w)); err != nil {
				return err
			}
		} else if err := l.runWrites(ctx, c, batch); err != nil {
			return err
		}
		cctx := ctx
		if more := l.late(durable, len(batch)); len(more) > 0 {
			cctx = context.WithoutCancel(ctx)
			*taken = append(*taken, more...)
			batch = append(batch[:len(batch):len(batch)], more...) // not into the leader's array
			for _, x := range more {
				l.locked(x.ctx, x.ls)
			}
			if err := l.runWrites(cctx, c, more); err != nil {
				return err
			}
		}
		if _, err := c.exec(cctx, `COMMIT`); err != nil {
			return err
		}
		committed = true
		if durable {
			return l.syncWALDir()
		}
		return nil
	}))
	return batch, err
}

// late takes out of the group's pending writes those that need a sync as
// durable says (up to maxGroup in all, with have): the writes that joined
// while a part of the same kind ran its statements, to commit with it
// (runGroup's late). Most are the done marks of AtLeastOnce runs whose
// claims the group's first part has just committed (and the next claims
// of runs whose done marks the last group committed): without it, each
// would wait for the next group, behind its fsync.
func (l *Ledger) late(durable bool, have int) []*groupWrite {
	g := &l.group
	g.mu.Lock()
	defer g.mu.Unlock()
	var more []*groupWrite
	kept := g.pending[:0]
	for _, x := range g.pending {
		if x.durable == durable && have+len(more) < maxGroup {
			x.ls.waited = true // it waited behind the group
			more = append(more, x)
		} else {
			kept = append(kept, x)
		}
	}
	clear(g.pending[len(kept):])
	g.pending = kept
	return more
}

// groupWtx is the transaction x's f sees on the kept connection c.
func (l *Ledger) groupWtx(c *wconn, x *groupWrite) *wtx {
	return &wtx{execer: c.conn, wc: c, ctx: x.ctx, l: l, pool: l.db, shift: x.ls.shift(l.clock), began: x.ls.clock}
}

// runSavepoints runs each write of batch in a savepoint of its own: one
// whose f fails (or whose context has ended) is rolled back to it, with its
// error in its err. An error of the savepoints themselves is the group's.
func (l *Ledger) runSavepoints(ctx context.Context, c *wconn, batch []*groupWrite) error {
	return l.runSavepointsWith(ctx, c, batch, func(x *groupWrite, tx *wtx) error { return x.f(tx) })
}

// runSavepointsWith is runSavepoints with run(x, tx) as each write's
// statements (runBatch: a batched write's miss).
func (l *Ledger) runSavepointsWith(ctx context.Context, c *wconn, batch []*groupWrite, run func(*groupWrite, *wtx) error) error {
	for _, x := range batch {
		x.err = nil
		if err := context.Cause(x.ctx); err != nil && x.ctx.Err() != nil {
			x.err = err
			continue
		}
		if _, err := c.exec(ctx, `SAVEPOINT idem_group`); err != nil {
			return err
		}
		if err := run(x, l.groupWtx(c, x)); err != nil {
			x.err = l.writeErr(err)
			if _, err := c.exec(ctx, `ROLLBACK TO idem_group`); err != nil {
				return err
			}
		}
		if _, err := c.exec(ctx, `RELEASE idem_group`); err != nil {
			return err
		}
	}
	return nil
}
