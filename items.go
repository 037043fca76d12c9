package idem

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemgo/idem/idemstore"
	"github.com/idemgo/idem/internal/runctx"
	"github.com/idemgo/idem/internal/storeof"
	"golang.org/x/time/rate"
)

// ItemCounts is a period's items by status (what a fan-out reports).
type ItemCounts = idemstore.ItemCounts

func openItems(c ItemCounts) int64 { return c.Pending + c.Running + c.Failed }

type eachConfig struct {
	workers  int
	batch    int
	progress func(key Key, done, total int64)
	rate     float64 // items a second; 0: no limit
	burst    int
	pause    time.Duration
	breaker  *itemBreaker
}

// eachResult is what a fan-out reports ([EachResult]): the period's
// items by status when it returned.
type eachResult struct {
	Key     Key
	Outcome Outcome // Ran when the period was completed now, AlreadyDone, or the failure
	Counts  ItemCounts
	Parked  []string // items parked by this call (at most 100 listed)
}

// txItems runs a window of items in the store's transaction (EachTx):
// item runs an item's call of fn, with the item's Info in its context.
type txItems func(ctx context.Context, step idemstore.ItemStep, claims []idemstore.ItemClaim, item itemFunc, failed func(idemstore.ItemClaim, error) idemstore.ItemEnd) (ends []idemstore.ItemEnd, lost []string, err error)

// itemFunc runs call, fn's call for the claim c, or returns errDeferredItem
// without calling it.
type itemFunc func(ctx context.Context, c idemstore.ItemClaim, call func(context.Context) error) error

type eacher struct {
	s      idemstore.ItemStore
	key    Key
	cfg    *config
	fn     func(context.Context, string) error
	tx     txItems
	done   atomic.Int64
	total  int64
	mu     sync.Mutex // serializes progress calls and parked
	parked []string

	guards   []Guard
	limiter  *rate.Limiter            // WithRate; nil: no limit
	paceMu   sync.Mutex               // orders the limiter's reservations
	paceLast time.Time                // the time of the last reservation
	deferral atomic.Pointer[Deferral] // set when the call is deferred: the workers stop claiming
	broken   atomic.Bool              // the breaker opened: items not run yet are handed back
	halt     atomic.Pointer[error]    // a worker's error, which ends the call: the others start no more items
	owner    string                   // who the item claims name: this process, or a crashed run's own (internal/runctx)
}

// call names the call the eacher serves, for errors: "Each" or "EachTx".
func (e *eacher) call() string {
	if e.tx != nil {
		return callEachTx.name
	}
	return callEach.name
}

// each is Each's and EachTx's engine for the period key: it checks the
// call, answers for a period settled already, records the item set
// (record), works the items until none is open (workAll), and marks the
// period done (markDone). tx, unless nil, runs a window of items in the
// store's transaction (EachTx).
func each(ctx context.Context, s idemstore.ItemStore, key Key, items iter.Seq2[string, error], cfg *config, fn func(context.Context, string) error, tx txItems) (res eachResult, err error) {
	if idemstore.Traced(ctx) {
		call := "idem.Each"
		if tx != nil {
			call = "idem.EachTx"
		}
		var endSpan func(idemstore.SpanEnd)
		ctx, endSpan = idemstore.StartSpan(ctx, idemstore.SpanStart{Kind: idemstore.SpanEach, Key: key, Attrs: []idemstore.Attr{
			{Key: idemstore.AttrCall, Value: call}, {Key: idemstore.AttrMode, Value: cfg.mode.name},
			{Key: idemstore.AttrStore, Value: storeof.TypeName(s)}, {Key: idemstore.AttrWorkers, Value: cfg.each.workers}}})
		defer func() {
			o := res.Outcome
			if o == 0 {
				o = Failed
			}
			endSpan(idemstore.SpanEnd{Outcome: o.String(), Err: err, Attrs: []idemstore.Attr{
				{Key: idemstore.AttrItems, Value: int(res.Counts.Total())}}})
		}()
	}
	var mark Result // the Run of the period's done mark, if it ran
	if cfg.observer != nil {
		// One Result for the period, with its item counts (the done mark's
		// Run reports nothing of its own).
		start := cfg.clock.Now()
		defer func() {
			o := res.Outcome
			if o == 0 {
				o = Failed
			}
			cfg.observer(Result{Key: key, Outcome: o, Attempt: mark.Attempt, Duration: cfg.clock.Now().Sub(start),
				Err: err, Items: res.Counts})
		}()
	}
	if tx != nil {
		cfg.mode = atLeastOnce
	}
	if cfg.each.batch == 0 {
		cfg.each.batch = 100
		if tx == nil && !cfg.mode.rerun && cfg.mode.has == nil { // AtMostOnce
			cfg.each.batch = 1
		}
	}
	res = eachResult{Key: key}
	defer func() {
		if err != nil && res.Outcome == 0 {
			res.Outcome = Failed // a store error, an invalid option: before anything settled
		}
	}()
	guards, err := checkEach(ctx, s, key, cfg)
	if err != nil {
		return res, err
	}
	if settled, err := settledAlready(ctx, s, key, cfg, &res); settled || err != nil {
		return res, err
	}
	// The call holds a place of each "at once" limit for all its items;
	// its rates pace the items (pace).
	ctx, release, d := takeLimits(ctx, cfg.limits, 0)
	if d != nil {
		logDeferral(ctx, cfg.logger, key, d)
		res.Outcome = Deferred
		res.Counts, _ = s.CountItems(ctx, key)
		return res, &Error{Key: key, Outcome: Deferred, Err: d}
	}
	defer release()
	e := &eacher{s: s, key: key, cfg: cfg, fn: fn, tx: tx, guards: guards, owner: runctx.Owner(ctx)}
	if cfg.each.rate > 0 {
		e.limiter = rate.NewLimiter(rate.Limit(cfg.each.rate), cfg.each.burst)
		if tx != nil {
			cfg.each.batch = min(cfg.each.batch, cfg.each.burst) // a window waits for all its tokens
		}
	}
	if e.gate(ctx) { // before anything is written
		counts, _ := s.CountItems(ctx, key)
		err = e.deferred(&res, counts)
		return res, err
	}
	counts, counted, err := e.recordSet(ctx, items)
	if err != nil {
		return res, err
	}
	if settled, err := e.workAll(ctx, &res, &counts, counted); !settled {
		return res, err
	}
	res.Counts, res.Parked = counts, e.parked
	if counts.Unknown > 0 {
		res.Outcome = Unknown
		return res, &Error{Key: key, Outcome: Unknown,
			Err: fmt.Errorf("%d items may or may not have taken effect; resolve them", counts.Unknown)}
	}
	// Every item is done or parked: mark the period done.
	err = markDone(ctx, s, key, cfg, &mark)
	res.Outcome = mark.Outcome
	if mark.Outcome == AlreadyDone {
		res.Outcome = Ran // another holder marked it a moment ago; the items ran now
	}
	return res, err
}

// checkEach checks the call before anything is read or written: the key,
// that it is not made inside a Run (the period's done mark could never be
// written), its guards (bound to the store: they are returned) and that
// WithRate's and WithPause's waits leave room in a lease.
func checkEach(ctx context.Context, s idemstore.ItemStore, key Key, cfg *config) ([]Guard, error) {
	if cfg.err != nil {
		return nil, cfg.err
	}
	if err := key.Validate(); err != nil {
		return nil, err
	}
	if err := nestedRun(ctx, key); err != nil {
		return nil, &Error{Key: key, Outcome: Failed, Err: err}
	}
	guards, err := bindGuards(cfg.guards, s)
	if err != nil {
		return nil, err
	}
	if r := cfg.each.rate; r > 0 && time.Duration(float64(time.Second)/r) >= cfg.lease/3 {
		return nil, invalidOption("WithRate(%v, %d): one item per %v, not below a third of the lease (%v)", r, cfg.each.burst,
			time.Duration(float64(time.Second)/r), cfg.lease)
	}
	if p := cfg.each.pause; p > 0 && p >= cfg.lease/3 {
		return nil, invalidOption("WithPause(%v): not below a third of the lease (%v)", p, cfg.lease)
	}
	return guards, nil
}

// settledAlready reports whether the period key is settled before the
// call works any item: recorded with other parameters (res is
// ParamsMismatch, with its error) or done (res is AlreadyDone, with its
// counts). The period is done whatever its counts: a store that fails to
// count them leaves Counts empty (and says so in the log), not the outcome
// in doubt.
func settledAlready(ctx context.Context, s idemstore.ItemStore, key Key, cfg *config, res *eachResult) (bool, error) {
	rec, ok, err := s.Lookup(ctx, key)
	switch {
	case err != nil:
		return false, err
	case ok && idemstore.Mismatch(rec.Fingerprint, cfg.fingerprint):
		res.Outcome = ParamsMismatch
		return true, mismatch(key, rec.Fingerprint, cfg.fingerprint)
	case ok && rec.Status == StatusDone:
		res.Outcome = AlreadyDone
		if res.Counts, err = s.CountItems(ctx, key); err != nil {
			res.Counts = ItemCounts{}
			if cfg.logger != nil {
				cfg.logger.LogAttrs(ctx, slog.LevelWarn, "idem: counting the items of a done period failed; its result has no counts",
					slog.String("job", key.Job), slog.String("period", key.Period), slog.Any("error", err))
			}
		}
		return true, nil
	}
	return false, nil
}

// recordSet records the period's item set from items unless it is sealed
// already, and returns the period's counts. counted says whether they are
// the set's as recorded: without a progress report to start from them,
// they are not counted after recording (the workers start at once, and
// the first count is the one after their work).
func (e *eacher) recordSet(ctx context.Context, items iter.Seq2[string, error]) (counts ItemCounts, counted bool, err error) {
	// A store that gives turns to record the set says, with the turn,
	// whether it is sealed: no count before it.
	if _, turns := e.s.(idemstore.ItemRecordTurns); !turns {
		if counts, err = e.s.CountItems(ctx, e.key); err != nil {
			return counts, false, err
		}
	}
	counted = true
	if !counts.Sealed {
		if err := e.record(ctx, items); err != nil {
			return counts, false, err
		}
		counted = e.cfg.each.progress != nil
		if counted {
			if counts, err = e.s.CountItems(ctx, e.key); err != nil {
				return counts, false, err
			}
		}
	}
	e.done.Store(counts.Done + counts.Parked)
	e.total = counts.Total()
	return counts, counted, nil
}

// workAll runs the workers (work) until no item of the period is open,
// waiting between rounds for the items that other holders work or that
// back off, and reports true with the period's counts in *counts then.
// Otherwise (an error, the call deferred) it reports false with the
// error to return, res set as the call ends.
func (e *eacher) workAll(ctx context.Context, res *eachResult, counts *ItemCounts, counted bool) (bool, error) {
	var held time.Duration // the last wait for items that others hold
	for {
		if err := e.work(ctx); err != nil {
			if !counted && !idemstore.IsStop(err) {
				*counts, _ = e.s.CountItems(context.WithoutCancel(ctx), e.key) // for the result alone
			}
			res.Outcome, res.Counts, res.Parked = Failed, *counts, e.parked
			if idemstore.IsStop(err) {
				return false, err
			}
			return false, fmt.Errorf("idem: %s %s: %w", e.call(), e.key, err)
		}
		c, err := e.s.CountItems(ctx, e.key)
		if err != nil {
			return false, err
		}
		*counts = c
		if openItems(c) == 0 {
			return true, nil // settled, even if a guard refused after the last window: mark the period
		}
		if e.stopped() {
			return false, e.deferred(res, c)
		}
		// Others hold items, or items back off: wait for them. While others
		// hold items, look again soon, then less and less often (heldPoll,
		// doubling up to the poll interval): the end of a period's last
		// chunk is seen about as soon as it has been waited for.
		wait := e.cfg.poll
		if c.Pending+c.Running == 0 && !c.NextRetry.IsZero() {
			// NextRetry may be on the store's clock (ItemCounts.Now).
			now := c.Now
			if now.IsZero() {
				now = e.cfg.clock.Now()
			}
			wait = max(wait, c.NextRetry.Sub(now))
		} else if c.Pending+c.Running > 0 {
			held = min(max(2*held, heldPoll), e.cfg.poll)
			wait = held
		}
		if err := sleep(ctx, e.cfg.clock, wait); err != nil {
			res.Outcome, res.Counts, res.Parked = Failed, c, e.parked
			return false, &Error{Key: e.key, Outcome: Failed, Err: err}
		}
	}
}

// deferred ends the call deferred: res gets the period's counts and the
// items this call parked, and the error returned is the deferral's.
func (e *eacher) deferred(res *eachResult, counts ItemCounts) error {
	d := e.deferral.Load()
	res.Outcome, res.Counts, res.Parked = Deferred, counts, e.parked
	return &Error{Key: e.key, Outcome: Deferred, Err: d}
}

// markDone writes the done mark of the period key, whose items are all
// settled, through a Run of its own (reporting to mark). The mark's body
// has no effect and every item is settled, so an abandoned mark is simply
// written again, whatever the items' mode: the items' downstream check is
// never asked about the period, and a crash between the mark's claim and
// its write leaves nothing unknown. For the same reason abandoned marks
// never park it (markBackoff).
func markDone(ctx context.Context, s idemstore.ItemStore, key Key, cfg *config, mark *Result) error {
	pc := *cfg // the done mark's Run: its own copy
	pc.mode, pc.report, pc.observer = atLeastOnce, mark, nil
	pc.backoff = markBackoff(cfg.backoff)
	pc.wait = true          // another holder may be writing the same mark this instant
	pc.pollFirst = heldPoll // which takes it a moment: look again soon
	// Its span, inside the call's, is named as the done mark's.
	pc.spanCall = "idem.Each.mark"
	// A store that marks a key with no record done in one write does so:
	// no claim before the mark, and the holders that lose the race find
	// the period done instead of waiting for another holder's mark.
	var fresh freshBody
	if fm, ok := s.(idemstore.FreshMarker); ok && !pc.cursor {
		fresh = func(ctx context.Context, req idemstore.ClaimRequest) (idemstore.Claim, bool, []byte, *fnError, error) {
			done, err := fm.MarkFresh(ctx, req)
			return idemstore.Claim{}, done, nil, nil, err
		}
	}
	return execute(ctx, s, key, &pc, func(context.Context) ([]byte, error) { return nil, nil }, nil, fresh)
}

// markBackoff is the Backoff of a period's done mark: b's delays, and
// where b gives up, the delay of the last attempt b allows. The mark has
// no effect of its own, so the attempts that crashes abandon between its
// claim and its write must not park a period whose items are settled.
func markBackoff(b Backoff) Backoff {
	return BackoffFunc(func(n int) (time.Duration, bool) {
		for ; n > 0; n-- {
			if d, ok := b.Next(n); ok {
				return d, true
			}
		}
		return 0, true
	})
}

// heldPoll is Each's first wait for items that other holders work, and
// for another holder's mark of the period: the waits double from there up
// to the poll interval.
const heldPoll = time.Millisecond

// chunkSize is how many items a chunk holds at most.
const chunkSize = 500

// record streams the item ids into the store in chunks, then seals the set.
// A period too small to give every worker a full chunk is cut into one
// chunk per worker, so that its items, too, are worked in parallel: up to
// chunkSize*workers ids (at most 8192) are held before the first chunk is
// written. A store that records in bulk (idemstore.ItemRecorder) gets
// them in one call, and after that up to 16 chunks (8,000 ids) a call; it
// checks the chunks against each other once, when the set is sealed. A
// store that gives turns to record (idemstore.ItemRecordTurns) is asked for
// the period's turn first, for a lease at most: a caller that finds the set
// sealed once it has the turn records nothing; the turn's last chunks go
// to its Seal, which may send them with the seal.
func (e *eacher) record(ctx context.Context, items iter.Seq2[string, error]) error {
	perWorker := chunkSize * e.cfg.each.workers
	hold := min(perWorker, 8192)
	rec, bulk := e.s.(idemstore.ItemRecorder)
	recordChunks := func(chunks [][]string) error { return rec.RecordItems(ctx, e.key, chunks) }
	seal := func() error { return e.s.SealItems(ctx, e.key) }
	var sealWith func(last [][]string) error // a turn's: the last chunks and the seal
	if t, ok := e.s.(idemstore.ItemRecordTurns); ok {
		turn, err := t.RecordTurn(ctx, e.key, e.cfg.lease)
		if err != nil {
			return err
		}
		defer turn.Release()
		if turn.Sealed() {
			return nil
		}
		recordChunks = func(chunks [][]string) error { return turn.RecordItems(ctx, chunks) }
		sealWith = func(last [][]string) error { return turn.Seal(ctx, last) }
	}
	buf := make([]string, 0, hold)
	small := true // nothing written yet: the period may be small
	// cut is buf in chunks of size.
	cut := func(size int) [][]string {
		var chunks [][]string
		for i := 0; i < len(buf); i += size {
			chunks = append(chunks, buf[i:min(i+size, len(buf))])
		}
		return chunks
	}
	flush := func(size int) error {
		if bulk {
			if chunks := cut(size); len(chunks) > 0 {
				if err := recordChunks(chunks); err != nil {
					return err
				}
			}
		} else {
			for i := 0; i < len(buf); i += size {
				if err := e.s.AddItems(ctx, e.key, buf[i:min(i+size, len(buf))]); err != nil {
					return err
				}
			}
		}
		buf = buf[:0]
		return nil
	}
	for it, err := range items {
		if err != nil {
			return fmt.Errorf("idem: %s %s: generating items: %w", e.call(), e.key, err)
		}
		if err := idemstore.ValidatePart("item", it); err != nil {
			return &KeyError{Key: e.key, Reason: err.Error()}
		}
		buf = append(buf, it)
		if len(buf) == hold {
			small = false
			if err := flush(chunkSize); err != nil {
				return err
			}
			if bulk {
				hold = max(hold, recordBatch*chunkSize)
				if cap(buf) < hold {
					buf = make([]string, 0, hold)
				}
			}
		}
	}
	size := chunkSize
	if small && len(buf) <= perWorker {
		size = max(1, (len(buf)+e.cfg.each.workers-1)/e.cfg.each.workers)
	}
	if sealWith != nil {
		return sealWith(cut(size))
	}
	if err := flush(size); err != nil {
		return err
	}
	return seal()
}

// recordBatch is how many chunks record gives a bulk recorder
// (idemstore.ItemRecorder) a call, at most.
const recordBatch = 16

// work runs the workers until no item can be claimed.
func (e *eacher) work(ctx context.Context) error {
	var wg sync.WaitGroup
	for range e.cfg.each.workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := e.worker(ctx); err != nil {
				e.halt.CompareAndSwap(nil, &err)
			}
		}()
	}
	wg.Wait()
	if p := e.halt.Load(); p != nil {
		return *p
	}
	return nil
}

// ending returns why the workers must start no more items: the error of
// a worker, which ends the call, or the cause of ctx's end; nil while
// they may go on. A worker's error does not cancel the others' context:
// their fn calls end as they would have, and a store call on its way
// (a claim, say) is not abandoned to land after the call returned,
// holding items for a lease that no one works.
func (e *eacher) ending(ctx context.Context) error {
	if p := e.halt.Load(); p != nil {
		return *p
	}
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	return nil
}

func (e *eacher) info(c idemstore.ItemClaim) Info {
	return Info{Key: e.key, Item: c.Item, Attempt: c.Attempt, RequestID: e.key.ItemRequestID(c.Item), Owner: e.owner}
}

// itemCtx is fn's context for one item: its Info (made when asked for: a
// request id costs a hash, and most fns never ask) and the window's lease.
type itemCtx struct {
	context.Context
	e     *eacher
	c     idemstore.ItemClaim
	lease *leaseState
}

func (c *itemCtx) Value(key any) any {
	switch key.(type) {
	case infoKey:
		return c.e.info(c.c)
	case leaseKey:
		return c.lease
	}
	return c.Context.Value(key)
}

// worker claims chunks (or single items) of the period and works each
// (workChunk) until none can be claimed, the call is deferred, or an error
// ends it. Each chunk worked is a span of its own when traced.
func (e *eacher) worker(wctx context.Context) (err error) {
	m := e.cfg.mode
	window := e.cfg.each.batch
	// endChunk ends the span of the chunk being worked (a no-op between
	// chunks, or untraced).
	endChunk := func(error) {}
	defer func() { endChunk(err) }()
	for {
		ctx := wctx
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		if e.halt.Load() != nil || e.stopped() || e.gate(ctx) {
			return nil
		}
		now := e.cfg.clock.Now()
		b, err := e.s.ClaimItems(ctx, e.key, idemstore.ItemClaimRequest{
			N: window, Owner: e.owner, Now: now, Lease: e.cfg.lease,
			Durable: e.tx == nil && m.durableClaim(), TakeUnknown: e.tx == nil && m.takeUnknown(),
		})
		if err != nil || len(b.Items) == 0 {
			return err
		}
		if idemstore.Traced(ctx) {
			var end func(idemstore.SpanEnd)
			ctx, end = idemstore.StartSpan(ctx, idemstore.SpanStart{Kind: idemstore.SpanChunk, Key: e.key, Attrs: []idemstore.Attr{
				{Key: idemstore.AttrChunk, Value: b.Chunk}, {Key: idemstore.AttrAttempt, Value: b.Attempt},
				{Key: idemstore.AttrItems, Value: len(b.Items)}, {Key: idemstore.AttrWorkers, Value: e.cfg.each.workers}}})
			endChunk = func(err error) {
				end(idemstore.SpanEnd{Err: err})
				endChunk = func(error) {}
			}
		}
		if err := idemstore.Checkpoint(ctx, idemstore.AfterClaim, e.key); err != nil {
			return err
		}
		if stop, err := e.workChunk(ctx, b, now); stop {
			return err
		}
		endChunk(nil)
		if err := e.pausing(ctx); err != nil {
			return err
		}
	}
}

// workChunk works the chunk b, claimed at now, window by window: each
// window's done marks are one write, which also renews the chunk's lease
// and marks the next window started. Single items are one window. It
// returns stop true when the worker must end, with err (nil when the call
// was deferred or the breaker opened and the window was handed back);
// false when the chunk is worked as far as this attempt goes.
func (e *eacher) workChunk(ctx context.Context, b idemstore.ItemBatch, now time.Time) (stop bool, err error) {
	window := e.cfg.each.batch
	lease := newLeaseState(e.cfg.clock, now.Add(e.cfg.lease))
	step := idemstore.ItemStep{Chunk: b.Chunk, Attempt: b.Attempt, From: b.Pos}
	started := true // the window is marked started (by the claim, or the last window's step)
	for items := b.Items; len(items) > 0; {
		win := items[:min(window, len(items))]
		if b.Chunk == 0 {
			win = items
		}
		if e.broken.Load() {
			// The breaker opened while this window was marked started:
			// hand its items back unrun. (A window marked started when
			// a guard refused runs: readyStep marks nothing after it.)
			return true, e.release(ctx, step, win, started)
		}
		var ends []idemstore.ItemEnd
		var lost []string
		if e.tx != nil {
			var probe uint64 // the window is the breaker's probe
			if br := e.cfg.each.breaker; br != nil {
				// Acquired outside the transaction: a worker may wait
				// here for another's probe.
				var d *Deferral
				if probe, d, err = br.acquire(ctx, e.cfg.clock); err != nil {
					return true, err
				} else if d != nil {
					e.stop(ctx, d)
					return true, e.release(ctx, step, win, started)
				}
				if probe != 0 {
					win = win[:1]
				}
			}
			ends, lost, err = e.txWindow(ctx, &step, win, len(items), probe)
		} else {
			ends, err = e.run(ctx, win, b.Chunk != 0, lease, e.cfg.clock.Now().Add(e.cfg.lease/3))
			if err == nil && len(ends) > 0 {
				e.readyStep(ctx, &step, len(ends), len(items), false)
				lost, err = e.s.FinishItems(ctx, e.key, step, ends)
			}
		}
		if err != nil {
			return true, err
		}
		e.report(ctx, ends, lost)
		if len(ends) > 0 {
			if err := idemstore.Checkpoint(ctx, idemstore.AfterDone, e.key); err != nil {
				return true, err
			}
		}
		// A window cut short (a third of the lease gone, or the lease
		// run out by this process's clock) goes on from where it
		// stopped: its done marks, fenced by the chunk's attempt,
		// renewed the lease. Lost means another attempt has the chunk.
		if len(ends) == 0 || len(lost) > 0 || b.Chunk == 0 || step.Next == 0 && (e.stopped() || e.ending(ctx) != nil) {
			break
		}
		items = items[len(ends):]
		step.From += len(ends)
		started = step.Next > 0
		lease.until.Store(step.LeaseUntil.UnixNano())
		if err := e.pausing(ctx); err != nil {
			return true, err
		}
	}
	return false, nil
}

// txWindow runs the window win of an EachTx in the store's transaction,
// its starts paced by the call's rates, with step, readied for the window
// (of the left items of the chunk), settling it in the same transaction.
// probe, unless zero, is the breaker's probe that win is: it ends with the
// window, whether its item ran and told the breaker or the transaction
// failed first (then the next item probes).
func (e *eacher) txWindow(ctx context.Context, step *idemstore.ItemStep, win []idemstore.ItemClaim, left int, probe uint64) ([]idemstore.ItemEnd, []string, error) {
	by, err := e.pace(ctx, len(win)) // the window's starts must go by then
	if err != nil {
		if probe != 0 {
			e.cfg.each.breaker.cancel(probe)
		}
		return nil, nil, err
	}
	e.readyStep(ctx, step, len(win), left, probe != 0)
	ends, lost, err := e.tx(ctx, *step, win, e.itemTx(probe, by), e.failed)
	if probe != 0 {
		e.cfg.each.breaker.cancel(probe)
	}
	return ends, lost, err
}

// readyStep readies the step that settles a window's first n items, of
// the left items of its chunk: it renews the lease and marks started the
// next window of what is left, unless the call is deferred (the guards are
// asked here) or the window is the breaker's probe: then it marks nothing
// more started and ends the chunk's lease at once, so any claimer may take
// the rest.
func (e *eacher) readyStep(ctx context.Context, step *idemstore.ItemStep, n, left int, probe bool) {
	step.Now = e.cfg.clock.Now()
	step.LeaseUntil, step.Next = step.Now.Add(e.cfg.lease), min(e.cfg.each.batch, left-n)
	why := e.ending(ctx)
	if step.Next > 0 && !probe && !e.stopped() && why == nil {
		e.gate(ctx)
	}
	if why != nil && idemstore.IsStop(why) {
		step.Next = 0 // stopped as a process that died right after this write
		return
	}
	if e.stopped() || probe || why != nil {
		step.LeaseUntil, step.Next = step.Now, 0
	}
}

// release hands back the items of a window that was marked started but
// will not run, the call being deferred: each ends failed with its failure
// count unchanged, due at once (a record of its own), and the chunk's
// lease ends now with nothing more marked started. Items in doubt in a
// mode that must check them are left as they are (their claim's lease runs
// out as after a crash). A window not marked started (after a step that
// marked nothing, which ended the lease) needs nothing.
func (e *eacher) release(ctx context.Context, step idemstore.ItemStep, win []idemstore.ItemClaim, started bool) error {
	if !started {
		return nil
	}
	ends := e.deferredEnds(win, step.Chunk != 0, nil)
	if len(ends) == 0 {
		return nil
	}
	step.Now = e.cfg.clock.Now()
	step.LeaseUntil, step.Next = step.Now, 0
	lost, err := e.s.FinishItems(ctx, e.key, step, ends)
	if err == nil {
		e.report(ctx, ends, lost)
	}
	return err
}

// deferredEnds are the ends of claims that will not run now, the call
// being deferred (why nil) or ending for why (a worker's error, ctx's
// end): see release. An item in doubt whose mode must check it is left as
// it is: for a chunk (whose doubtful items come first) the ends stop
// there, single items in doubt are left out.
func (e *eacher) deferredEnds(claims []idemstore.ItemClaim, chunk bool, why error) []idemstore.ItemEnd {
	ends := make([]idemstore.ItemEnd, 0, len(claims))
	for _, c := range claims {
		if c.Doubt && e.tx == nil && !e.cfg.mode.rerun {
			if chunk {
				break
			}
			continue
		}
		ends = append(ends, e.deferredEnd(c, why))
	}
	return ends
}

// deferredEnd is the end of an item that did not run because the call
// was deferred (why nil) or ended for why: failed, its failure count
// unchanged, due at once.
func (e *eacher) deferredEnd(c idemstore.ItemClaim, why error) idemstore.ItemEnd {
	now := e.cfg.clock.Now()
	msg := ErrDeferred.Error()
	switch d := e.deferral.Load(); {
	case why != nil:
		msg = (&notStartedError{why}).Error()
	case d != nil:
		msg += ": " + d.Error()
	}
	return idemstore.ItemEnd{Item: c.Item, Attempt: c.Attempt, Status: StatusFailed, Failures: c.Failures, NotBefore: now, Error: msg, Now: now}
}

// errDeferredItem is what the item function of an EachTx window returns
// for an item that did not run, the call being deferred.
var errDeferredItem = errors.New("idem: item deferred")

// notStartedError is what the item function of an EachTx window returns
// for an item that did not run because the call ends for why (a worker's
// error, ctx's end).
type notStartedError struct{ why error }

func (e *notStartedError) Error() string {
	return "idem: not started, the call ended: " + e.why.Error()
}

// itemTx is EachTx's item function for one window: it runs fn's call for
// the item unless the call is deferred or the breaker is open (probe: the
// window is the half-open breaker's probe), and tells the breaker how it
// ended. The window's starts of its rates must go by by (zero: whenever):
// if they are void when its first item would start (the transaction
// stalled before it began), or the store runs the window again, no item
// of it runs (errStartLate: each ends as voidEnd says).
func (e *eacher) itemTx(probe uint64, by time.Time) itemFunc {
	var first string
	late := false
	return func(ctx context.Context, c idemstore.ItemClaim, call func(context.Context) error) error {
		if why := e.ending(ctx); why != nil {
			return &notStartedError{why}
		}
		if !by.IsZero() {
			switch {
			case first == "":
				first, late = c.Item, time.Now().After(by)
			case c.Item == first:
				late = true // the store runs the window again: its starts are used
			}
			if late {
				return errStartLate
			}
		}
		br := e.cfg.each.breaker
		if e.broken.Load() && probe == 0 {
			return errDeferredItem
		}
		if br != nil && probe == 0 {
			if d := br.open(e.cfg.clock.Now()); d != nil {
				e.stop(ctx, d)
				return errDeferredItem
			}
		}
		err := call(context.WithValue(ctx, infoKey{}, e.info(c)))
		if br != nil {
			br.done(ctx, e.cfg.clock.Now(), probe, err)
		}
		return err
	}
}

// gate asks the guards, and whether the breaker is open; it stops the
// call and returns true when one says no.
func (e *eacher) gate(ctx context.Context) bool {
	d := checkGuards(ctx, e.guards, nil, e.key)
	if d == nil && e.cfg.each.breaker != nil {
		d = e.cfg.each.breaker.open(e.cfg.clock.Now())
	}
	if d == nil {
		return false
	}
	e.stop(ctx, d)
	return true
}

// stop defers the call for d (the first reason is kept and logged).
func (e *eacher) stop(ctx context.Context, d *Deferral) {
	if d.Reason == ReasonBreaker {
		e.broken.Store(true)
	}
	if e.deferral.CompareAndSwap(nil, d) {
		logDeferral(ctx, e.cfg.logger, e.key, d)
	}
}

func (e *eacher) stopped() bool { return e.deferral.Load() != nil }

// pace waits until n items may start (WithRate, WithLimits). A
// rate of WithLimits' starts must go by the time it returns (zero:
// whenever), or they are void.
func (e *eacher) pace(ctx context.Context, n int) (time.Time, error) {
	by, err := paceLimits(ctx, e.cfg.limits, n)
	if err != nil || e.limiter == nil {
		return by, err
	}
	// The limiter must see its times in order: one that goes back (a
	// worker that read the clock before another reserved) counts the time
	// in between twice and grants tokens too early.
	e.paceMu.Lock()
	now := e.cfg.clock.Now()
	at := now
	if at.Before(e.paceLast) {
		at = e.paceLast
	}
	e.paceLast = at
	r := e.limiter.ReserveN(at, n)
	e.paceMu.Unlock()
	if !r.OK() {
		return by, fmt.Errorf("idem: %s %s: a window of %d items exceeds the rate's burst %d", e.call(), e.key, n, e.limiter.Burst())
	}
	return by, sleep(ctx, e.cfg.clock, r.DelayFrom(now))
}

// pausing is the pause after a window ([WithPause]).
func (e *eacher) pausing(ctx context.Context) error {
	if e.cfg.each.pause == 0 || e.stopped() {
		return nil
	}
	return sleep(ctx, e.cfg.clock, e.cfg.each.pause)
}

// run applies fn to a window of claimed items, in order, and returns how
// each ended: all of the window's items, or fewer when it cut the window
// short, at the first item after cut (so that the done marks renew the
// lease in time) or when the lease ran out. When the call is deferred (the
// breaker opened, here or in another worker), the items not run yet end
// deferred.
func (e *eacher) run(ctx context.Context, claims []idemstore.ItemClaim, chunk bool, lease *leaseState, cut time.Time) (ends []idemstore.ItemEnd, err error) {
	ends = make([]idemstore.ItemEnd, 0, len(claims))
	br := e.cfg.each.breaker
	// now is read after each fn: the time of its end, and of the next
	// item's check of the window's cut, unless something may wait between
	// them (the breaker, the rate, a check). The lease is checked on a
	// reading of its own, right before the item runs: a process that
	// stalled between two items must not run the next.
	waits := br != nil || e.limiter != nil
	now := e.cfg.clock.Now()
	for i, c := range claims {
		ictx := &itemCtx{Context: ctx, e: e, c: c, lease: lease}
		checked := c.Doubt && !e.cfg.mode.rerun // settled by its check, fn may not run
		var probe uint64                        // the item is the breaker's probe
		var by time.Time                        // the rates' starts must go by then (zero: whenever)
		if rest, end := e.endingEnds(ctx, claims[i:], chunk); end {
			return append(ends, rest...), nil
		}
		if !checked {
			if e.broken.Load() {
				return append(ends, e.deferredEnds(claims[i:], chunk, nil)...), nil
			}
			if br != nil {
				var d *Deferral
				if probe, d, err = br.acquire(ctx, e.cfg.clock); err != nil {
					return nil, err
				} else if d != nil {
					e.stop(ctx, d)
					return append(ends, e.deferredEnds(claims[i:], chunk, nil)...), nil
				}
			}
			if by, err = e.pace(ctx, 1); err != nil {
				if probe != 0 {
					br.cancel(probe)
				}
				return nil, err
			}
		}
		if waits || c.Doubt {
			now = e.cfg.clock.Now()
		}
		if len(ends) > 0 && now.After(cut) {
			if probe != 0 {
				br.cancel(probe)
			}
			return ends, nil
		}
		if CheckLease(ictx) != nil {
			// The window outlived its lease: another holder may claim these
			// items now. Leave the rest unrecorded; they are claimed again
			// (as doubtful) once the lease has expired, unless the done marks
			// of the ones before find the chunk still ours.
			if probe != 0 {
				br.cancel(probe)
			}
			return ends, nil
		}
		if c.Doubt {
			v, herr := e.cfg.mode.check(ictx, e.key)
			if end, settled := e.settle(c, v, herr, errors.New("an earlier attempt died")); settled {
				if probe != 0 {
					br.cancel(probe)
				}
				ends = append(ends, end)
				continue
			}
			if CheckLease(ictx) != nil { // the check took the rest of the lease
				if probe != 0 {
					br.cancel(probe)
				}
				return ends, nil
			}
		}
		// The rates' starts go now or are taken again: a start reserved
		// before a check that stalled must not go together with the ones
		// reserved since.
		for !by.IsZero() && time.Now().After(by) {
			if by, err = e.pace(ctx, 1); err != nil {
				if probe != 0 {
					br.cancel(probe)
				}
				return nil, err
			}
			if CheckLease(ictx) != nil { // the wait took the rest of the lease
				if probe != 0 {
					br.cancel(probe)
				}
				return ends, nil
			}
		}
		err := e.fn(ictx, c.Item)
		now = e.cfg.clock.Now()
		if br != nil && !checked {
			br.done(ctx, now, probe, err)
		}
		if cerr := idemstore.Checkpoint(ctx, idemstore.AfterFn, e.key); cerr != nil {
			return nil, cerr
		}
		if errors.Is(err, ErrLeaseLost) { // fn saw the lease run out: not the item's failure
			return ends, nil
		}
		if err == nil {
			ends = append(ends, idemstore.ItemEnd{Item: c.Item, Attempt: c.Attempt, Status: StatusDone, Now: now})
			continue
		}
		if !isHarmless(err) && !IsPermanent(err) {
			v, herr := e.cfg.mode.check(ictx, e.key)
			if end, settled := e.settle(c, v, herr, err); settled {
				ends = append(ends, end)
				continue
			}
		}
		ends = append(ends, e.failed(c, err))
	}
	return ends, nil
}

// endingEnds reports whether the call ends (a worker's error, ctx's end)
// before the first of claims starts: no item starts after that. A stopped
// call leaves them as a process that died would (rest is empty);
// otherwise rest hands them back (deferredEnds).
func (e *eacher) endingEnds(ctx context.Context, claims []idemstore.ItemClaim, chunk bool) (rest []idemstore.ItemEnd, end bool) {
	why := e.ending(ctx)
	if why == nil {
		return nil, false
	}
	if idemstore.IsStop(why) {
		return nil, true
	}
	return e.deferredEnds(claims, chunk, why), true
}

// settle turns a check's verdict on a doubtful item into its end; settled
// is false when the item should run (again).
func (e *eacher) settle(c idemstore.ItemClaim, v verdict, herr, cause error) (idemstore.ItemEnd, bool) {
	now := e.cfg.clock.Now()
	switch v {
	case verdictDone:
		return idemstore.ItemEnd{Item: c.Item, Attempt: c.Attempt, Status: StatusDone, Now: now}, true
	case verdictUnknown:
		msg := cause.Error()
		if herr != nil {
			msg = "downstream check failed: " + herr.Error() + "; after: " + msg
		}
		return idemstore.ItemEnd{Item: c.Item, Attempt: c.Attempt, Status: StatusUnknown, Failures: c.Failures, Error: msg, Now: now}, true
	}
	return idemstore.ItemEnd{}, false
}

// failed is the end of an item attempt whose fn failed: backoff or park.
func (e *eacher) failed(c idemstore.ItemClaim, err error) idemstore.ItemEnd {
	if errors.Is(err, errDeferredItem) {
		return e.deferredEnd(c, nil)
	}
	if ns := (*notStartedError)(nil); errors.As(err, &ns) {
		return e.deferredEnd(c, ns.why)
	}
	if errors.Is(err, errStartLate) {
		// fn did not run: as a deferred item, due at once, its failure
		// count unchanged.
		now := e.cfg.clock.Now()
		return idemstore.ItemEnd{Item: c.Item, Attempt: c.Attempt, Status: StatusFailed, Failures: c.Failures, NotBefore: now, Error: err.Error(), Now: now}
	}
	now := e.cfg.clock.Now()
	n := c.Failures + 1
	end := idemstore.ItemEnd{Item: c.Item, Attempt: c.Attempt, Failures: n, Error: err.Error(), Now: now}
	d, ok := e.cfg.backoff.Next(n)
	if !ok || IsPermanent(err) {
		end.Status = StatusParked
		return end
	}
	end.Status, end.NotBefore = StatusFailed, now.Add(d)
	return end
}

// report counts a window's ends that were recorded (not lost) and calls
// the progress callback.
func (e *eacher) report(ctx context.Context, ends []idemstore.ItemEnd, lost []string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	gone := make(map[string]bool, len(lost))
	for _, it := range lost {
		gone[it] = true
	}
	for _, end := range ends {
		if gone[end.Item] {
			continue
		}
		switch end.Status {
		case StatusDone:
			e.done.Add(1)
		case StatusParked:
			e.done.Add(1)
			if len(e.parked) < 100 {
				e.parked = append(e.parked, end.Item)
			}
			if e.cfg.logger != nil {
				e.cfg.logger.LogAttrs(ctx, slog.LevelError, "idem: item parked", slog.String("job", e.key.Job),
					slog.String("period", e.key.Period), slog.String("item", end.Item), slog.String("error", end.Error))
			}
		}
	}
	if e.cfg.each.progress != nil {
		e.cfg.each.progress(e.key, e.done.Load(), e.total)
	}
}
