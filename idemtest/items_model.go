package idemtest

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemstore"
	"github.com/idemgo/idem/internal/testwait"
)

// The model-based test of Each: random sequences of Each calls on a few
// periods, each period's items with a behaviour of their own (succeed, fail
// once or twice, fail after their effect, fail for ever, fail for good,
// stall past the lease),
// calls stopped at a random point of the item protocol (as a SIGKILL would
// stop them), calls whose store fails one of its calls for a moment
// (before the store, or after it applied the call, the reply lost:
// faultyItems), two calls at once sharing a period's items, and a first
// generation of the set that stopped half-way. After every operation the
// store's counts, each item's calls and effects, and the call's outcome are
// checked against what the modes promise; at the end of a sequence every
// period is run once more, after every lease has ended, and must be settled
// as its items' behaviours say.
//
// The clock is an auto clock (backoffs pass at once), the lease an hour
// (the waits of one operation move the clock by seconds, so no holder
// loses its lease to them), the backoff idem.MaxAttempts(3,
// idem.Constant(time.Second)). A stopped call's leases are then made to
// end by moving the clock past them, as a dead process's would; an item
// of kind itStall moves it past its holder's lease while its fn runs (in a
// call of one worker), as a process that stalls without dying would: the
// holder loses its lease without a crash.
//
// A call that a store error ended is then treated as a stopped one: the
// clock passes its leases, which a claim whose reply was lost may hold. A
// store error the call overcame (a Finish is tried again; a Renew, at the
// next heartbeat) must leave everything as if none had happened.
//
// What it does not cover: EachTx, operator actions on items.

// itemKind is what an item's fn does, call after call.
type itemKind int

const (
	itOK        itemKind = iota // its effect, nil
	itFlaky1                    // NothingHappened on its first call, then as itOK
	itFlaky2                    // NothingHappened on its first two calls, then as itOK
	itFailOnce                  // a plain error, no effect, on its first call; then as itOK
	itFailAfter                 // its effect, then a plain error, on its first call; then as itOK
	itPoison                    // NothingHappened on every call: parked after the Backoff's last attempt
	itPermanent                 // idem.Permanent on every call: parked at once
	itStall                     // on its first call in a call of one worker, the process stalls past the lease (no crash), then fn returns CheckLease's error; otherwise as itOK
)

func (k itemKind) String() string {
	return [...]string{"ok", "flaky1", "flaky2", "fail-once", "fail-after", "poison", "permanent", "stall"}[k]
}

// kindWeights is how often each kind is drawn, in percent.
var kindWeights = [...]int{itOK: 50, itFlaky1: 10, itFlaky2: 5, itFailOnce: 8, itFailAfter: 8, itPoison: 7, itPermanent: 7, itStall: 5}

func drawKind(r *rand.Rand) itemKind {
	x := r.IntN(100)
	for k, w := range kindWeights {
		if x < w {
			return itemKind(k)
		}
		x -= w
	}
	return itOK
}

// parks reports whether every item of this kind ends parked.
func (k itemKind) parks() bool { return k == itPoison || k == itPermanent }

// doubtful reports whether an item of this kind fails in a way that leaves
// an at-most-once item unknown (a plain error, with or without its effect).
func (k itemKind) doubtful() bool { return k == itFailOnce || k == itFailAfter }

const (
	imLease = time.Hour
	imTries = 3 // idem.MaxAttempts
)

// imPeriod is one period of a sequence: its items, their behaviours, and
// what the downstream saw.
type imPeriod struct {
	key   idem.Key
	mode  int // index into modes
	items []string
	kinds map[string]itemKind

	clk     *Clock
	mu      sync.Mutex
	calls   map[string]int // calls of fn
	effects map[string]int // effects applied
	stalls  int            // calls of fn that stalled past the lease
	stalled map[string]bool
	// canStall is set for an operation of one Each call with one worker:
	// no other claim can be on its way to the store while the clock
	// jumps. (One that is would be written with a lease counted from after
	// the jump, which its worker, counting from before, finds lost at
	// once: it would drop a chunk the store holds for a whole lease, and
	// the operation would wait that long. Nothing runs twice; it is only
	// slow.)
	canStall bool

	regenerated atomic.Int32 // generations of a done period's items (none allowed)

	crashes     int             // calls of this period stopped at a point, or ended by a store error
	faults      int             // of which ended by a store error (errTransient)
	faultsAfter int             // of which after the store applied the call
	faultsIn    map[string]int  // of which by the method that failed
	absorbed    map[string]int  // store errors a call overcame (it returned as if none had been), by method
	parked      map[string]bool // items Each reported parked
	last        idem.ItemCounts // the store's counts after the operation before
	done        bool            // Each reported the period completed
}

// fn is the items' fn. It checks the lease and applies its effect under
// p.mu, which has takes too, and a stall moves the clock under it: a
// holder that took an item over after a stall asks has only once the
// effect is applied, or can no longer be (CheckLease fails), so the
// modes' promises hold through a lease lost without a crash.
func (p *imPeriod) fn(ctx context.Context, item string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := p.calls[item]
	p.calls[item]++
	if p.kinds[item] == itStall && p.canStall && !p.stalled[item] {
		p.stalled[item] = true
		p.stalls++
		p.clk.Advance(imLease + time.Minute) // every lease held now ends, as a stalled process's would
	}
	if err := idem.CheckLease(ctx); err != nil {
		return err
	}
	switch k := p.kinds[item]; {
	case k == itPoison, k == itFlaky1 && n < 1, k == itFlaky2 && n < 2:
		return idem.NothingHappened(fmt.Errorf("%s: call %d: nothing happened", item, n+1))
	case k == itPermanent:
		return idem.Permanent(fmt.Errorf("%s: account closed", item))
	case k == itFailOnce && n == 0:
		return fmt.Errorf("%s: call 1: connection reset before sending", item)
	case k == itFailAfter && n == 0:
		p.effects[item]++
		return fmt.Errorf("%s: call 1: timeout after sending", item)
	}
	p.effects[item]++
	return nil
}

func (p *imPeriod) has(ctx context.Context, _ idem.Key) (bool, error) {
	info, ok := idem.InfoFrom(ctx)
	if !ok || info.Item == "" {
		return false, errors.New("idemtest: the check's context names no item")
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.effects[info.Item] > 0, nil
}

// stream generates the period's items in an order of r's choosing.
func (p *imPeriod) stream(r *rand.Rand) iter.Seq2[string, error] {
	ids := slices.Clone(p.items)
	r.Shuffle(len(ids), func(i, j int) { ids[i], ids[j] = ids[j], ids[i] })
	return func(yield func(string, error) bool) {
		for _, id := range ids {
			if !yield(id, nil) {
				return
			}
		}
	}
}

// imOp is one operation of a sequence.
type imOp struct {
	kind    string // "each", "pair", "add"
	period  int
	workers [2]int
	batch   int
	crashAt idemstore.Point // "each": stop the call at the nth passing of this point
	nth     int
	fault   int      // "each": the call's fault-th call of faultIn for the period fails (errTransient); 0: none
	faultIn string   // a store method (faultMethods)
	after   bool     // ... after the store applied it (the reply lost)
	add     []string // "add": a first generation that stopped half-way
}

func (op imOp) String() string {
	switch op.kind {
	case "add":
		return fmt.Sprintf("AddItems(period %d, %d items)", op.period, len(op.add))
	case "pair":
		return fmt.Sprintf("two Each at once (period %d, workers %d and %d, batch %d)", op.period, op.workers[0], op.workers[1], op.batch)
	}
	s := fmt.Sprintf("Each(period %d, workers %d, batch %d)", op.period, op.workers[0], op.batch)
	if op.crashAt != "" {
		s += fmt.Sprintf(" stopped at the %s point's passing %d", op.crashAt, op.nth)
	}
	if op.fault > 0 {
		s += ", " + op.storeFault(idem.Key{}).String()
	}
	return s
}

// testItemsModel runs the sequences. IDEM_ITEMS_MODEL_SEED reproduces
// one (its first sequence), IDEM_ITEMS_MODEL_SEQS sets how many, and
// IDEM_ITEMS_MODEL_FAULT=method puts every store fault in that method (one
// of faultMethods).
func testItemsModel(t *testing.T, h Harness) {
	seqs, ops := 6, 24
	seed := uint64(time.Now().UnixNano()%1_000_000_000) + 1
	if v := os.Getenv("IDEM_ITEMS_MODEL_SEED"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("IDEM_ITEMS_MODEL_SEED=%q: want a number", v)
		}
		seed = n
	}
	if v := os.Getenv("IDEM_ITEMS_MODEL_SEQS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("IDEM_ITEMS_MODEL_SEQS=%q: want a positive number", v)
		}
		seqs = n
	}
	faultIn := os.Getenv("IDEM_ITEMS_MODEL_FAULT")
	if faultIn != "" && !slices.Contains(faultMethods, faultIn) {
		t.Fatalf("IDEM_ITEMS_MODEL_FAULT=%q: want one of %v", faultIn, faultMethods)
	}
	t.Logf("items model: %d sequences of %d operations from seed %d (IDEM_ITEMS_MODEL_SEED, IDEM_ITEMS_MODEL_SEQS)", seqs, ops, seed)
	tally := map[string]int{}
	for i := range seqs {
		if !runItemsSequence(t, h, seed+uint64(i), ops, faultIn, tally) {
			return
		}
	}
	t.Logf("items model: passed: %d Each calls (%d stopped at a point, %d failed by a store error: %d after the store applied the call), %d pairs of calls at once, %d half-recorded sets, %d leases lost to a stall; at the end %d items done, %d parked, %d unknown",
		tally["each"], tally["stopped"], tally["faulted"], tally["faulted-after"], tally["pair"], tally["add"], tally["stalled"], tally["done"], tally["parked"], tally["unknown"])
	var in, absorbed []string
	for k, n := range tally {
		if m, ok := strings.CutPrefix(k, "faulted in "); ok {
			in = append(in, fmt.Sprintf("%s %d", m, n))
		}
		if m, ok := strings.CutPrefix(k, "absorbed in "); ok {
			absorbed = append(absorbed, fmt.Sprintf("%s %d", m, n))
		}
	}
	slices.Sort(in)
	slices.Sort(absorbed)
	t.Logf("items model: store errors that ended the call: %s; that the call overcame: %s", strings.Join(in, ", "), strings.Join(absorbed, ", "))
}

// runItemsSequence runs one sequence on a new store, its store faults all
// in faultIn if it is not empty; false after a failure.
func runItemsSequence(t *testing.T, h Harness, seed uint64, n int, faultIn string, tally map[string]int) bool {
	t.Helper()
	r := rand.New(rand.NewPCG(seed, 0x17e35))
	clk := NewAutoClock(start)
	s := itemStore(t, h.open(t, clk))
	var ps []*imPeriod
	for i := range 4 {
		p := &imPeriod{
			key:   idem.Key{Job: "im-" + modes[i%len(modes)].name, Period: fmt.Sprintf("2026-11-%02d", i+1)},
			clk:   clk,
			mode:  i % len(modes),
			kinds: map[string]itemKind{}, calls: map[string]int{}, effects: map[string]int{}, parked: map[string]bool{}, stalled: map[string]bool{}, faultsIn: map[string]int{}, absorbed: map[string]int{},
		}
		for j := range r.IntN(13) { // 0 to 12 items
			id := fmt.Sprintf("acct-%d-%02d", i, j)
			p.items = append(p.items, id)
			p.kinds[id] = drawKind(r)
		}
		ps = append(ps, p)
	}
	var log []string
	fail := func(format string, args ...any) bool {
		t.Helper()
		var b strings.Builder
		fmt.Fprintf(&b, "items model: seed %d (IDEM_ITEMS_MODEL_SEED=%d IDEM_ITEMS_MODEL_SEQS=1): ", seed, seed)
		fmt.Fprintf(&b, format, args...)
		b.WriteString("\nperiods:")
		for i, p := range ps {
			fmt.Fprintf(&b, "\n  %d %s (%s):", i, p.key, modes[p.mode].name)
			for _, id := range p.items {
				fmt.Fprintf(&b, " %s=%s", id, p.kinds[id])
			}
		}
		b.WriteString("\noperations:\n  " + strings.Join(log, "\n  "))
		t.Error(b.String())
		return false
	}
	for range n {
		op := imOp{period: r.IntN(len(ps)), workers: [2]int{1 + r.IntN(3), 1 + r.IntN(2)}, batch: 1 + r.IntN(4)}
		switch x := r.IntN(10); {
		case x < 6:
			op.kind = "each"
			switch x := r.IntN(100); {
			case x < 40:
				op.crashAt = []idemstore.Point{idemstore.AfterClaim, idemstore.AfterFn, idemstore.AfterDone}[r.IntN(3)]
				op.nth = 1 + r.IntN(4)
			case x < 60:
				op.fault, op.faultIn, op.after = 1+r.IntN(3), faultMethods[r.IntN(len(faultMethods))], r.IntN(2) == 0
				if faultIn != "" {
					op.faultIn = faultIn // every fault in this method
				}
			}
		case x < 9:
			op.kind = "pair"
		default:
			op.kind = "add"
			p := ps[op.period]
			for _, id := range p.items {
				if r.IntN(2) == 0 {
					op.add = append(op.add, id)
				}
			}
			r.Shuffle(len(op.add), func(i, j int) { op.add[i], op.add[j] = op.add[j], op.add[i] })
		}
		log = append(log, fmt.Sprintf("%d. %s", len(log)+1, op))
		tally[op.kind]++
		if msg := itemsStep(s, clk, ps[op.period], op, r); msg != "" {
			return fail("step %d, %s: %s", len(log), op, msg)
		}
		if msg := checkPeriods(s, ps, false); msg != "" {
			return fail("after step %d: %s", len(log), msg)
		}
	}
	// Every lease ends; then one more call settles each period.
	clk.Advance(imLease + time.Minute)
	for i, p := range ps {
		op := imOp{kind: "each", period: i, workers: [2]int{2, 1}, batch: 3}
		log = append(log, fmt.Sprintf("%d. (final) %s", len(log)+1, op))
		if msg := itemsStep(s, clk, p, op, r); msg != "" {
			return fail("final call, %s: %s", op, msg)
		}
	}
	if msg := checkPeriods(s, ps, true); msg != "" {
		return fail("at the end: %s", msg)
	}
	for _, p := range ps {
		tally["stopped"] += p.crashes - p.faults
		tally["faulted"] += p.faults
		tally["faulted-after"] += p.faultsAfter
		for m, n := range p.faultsIn {
			tally["faulted in "+m] += n
		}
		for m, n := range p.absorbed {
			tally["absorbed in "+m] += n
		}
		tally["stalled"] += p.stalls
		tally["done"] += int(p.last.Done)
		tally["parked"] += int(p.last.Parked)
		tally["unknown"] += int(p.last.Unknown)
	}
	return true
}

// imCall is one Each call's outcome.
type imCall struct {
	res idem.EachResult
	err error
}

// itemsStep runs op and checks what the call returned; "" when it is as
// the modes promise.
func itemsStep(s idemstore.ItemStore, clk *Clock, p *imPeriod, op imOp, r *rand.Rand) string {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// The goroutines as they are shortly before the limit: a step that
	// does not end is reported with where its calls were waiting (by the
	// time the limit ends them, they have returned).
	var stacks atomic.Pointer[string]
	dump := time.AfterFunc(2*time.Minute-10*time.Second, func() {
		g := testwait.Goroutines()
		stacks.Store(&g)
	})
	defer dump.Stop()
	if op.kind == "add" {
		if err := s.AddItems(ctx, p.key, op.add); err != nil {
			return fmt.Sprintf("AddItems: %v", err)
		}
		return ""
	}
	wasDone := p.done
	p.mu.Lock()
	callsBefore := sum(p.calls)
	p.mu.Unlock()
	p.mu.Lock()
	p.canStall = op.kind == "each" && op.workers[0] == 1
	p.mu.Unlock()
	defer func() { p.mu.Lock(); p.canStall = false; p.mu.Unlock() }()
	calls, fault := imEachCalls(ctx, s, p, op, r, wasDone)
	if ctx.Err() != nil {
		g := "(no goroutine dump)"
		if d := stacks.Load(); d != nil {
			g = *d
		}
		return fmt.Sprintf("the operation did not end within 2 minutes: %+v\ngoroutines 10 s before the limit:\n%s", calls, g)
	}
	crashed, failed, msg := imCheckErrors(p, op, calls, fault)
	if msg != "" {
		return msg
	}
	p.mu.Lock()
	callsAfter := sum(p.calls)
	p.mu.Unlock()
	if p.regenerated.Load() > 0 {
		return "the items of a done period were generated again"
	}
	if wasDone {
		if callsAfter != callsBefore {
			return fmt.Sprintf("fn ran %d times on a done period", callsAfter-callsBefore)
		}
		for _, c := range calls {
			if failed && errors.Is(c.err, errTransient) {
				continue
			}
			if c.err != nil || c.res.Outcome != idem.AlreadyDone {
				return fmt.Sprintf("Each of a done period: %v, outcome %s; want AlreadyDone", c.err, c.res.Outcome)
			}
		}
	}
	if crashed || failed {
		// A call stopped, or ended by a store error, may leave claims held
		// (the reply of a claim the store applied lost): they end, as a
		// dead process's would, or as this one's do in time.
		p.crashes++
		if failed {
			p.faults++
			p.faultsIn[fault.fired()]++
			if fault.after {
				p.faultsAfter++
			}
		}
		clk.Advance(imLease + time.Minute)
		return ""
	}
	if fault != nil && fault.fired() != "" {
		p.absorbed[fault.fired()]++ // the checks below hold all the same
	}
	return imCheckSettled(p, calls, fault)
}

// imEachCalls makes op's Each calls of the period p: one ("each"), stopped
// at op's crash point and on a store that fails as op says (fault, nil
// when it does not), or two at once on s ("pair"), each with its own
// stream of the items. A done period's items (wasDone) are never
// generated again: its streams count it if they are.
func imEachCalls(ctx context.Context, s idemstore.ItemStore, p *imPeriod, op imOp, r *rand.Rand, wasDone bool) (calls []imCall, fault *storeFault) {
	m := modes[p.mode]
	opts := func(workers int) []idem.Option {
		return []idem.Option{m.opt(p.has), idem.WithWorkers(workers), idem.WithBatch(op.batch),
			idem.WithLease(imLease), idem.WithBackoff(idem.MaxAttempts(imTries, idem.Constant(time.Second)))}
	}
	gen := func(r *rand.Rand) iter.Seq2[string, error] {
		if wasDone {
			return func(func(string, error) bool) { p.regenerated.Add(1) }
		}
		return p.stream(r)
	}
	switch op.kind {
	case "each":
		cctx := ctx
		if op.crashAt != "" {
			seen := 0
			cctx = CrashWhen(ctx, func(pt idemstore.Point, k idem.Key) bool {
				if pt == op.crashAt && k == p.key {
					seen++
				}
				return pt == op.crashAt && k == p.key && seen == op.nth
			})
		}
		es := s
		if op.fault > 0 {
			fault = op.storeFault(p.key)
			es = withFault(s, fault)
		}
		res, err := idem.Each(cctx, es, p.key, gen(r), p.fn, opts(op.workers[0])...)
		calls = append(calls, imCall{res, err})
	case "pair":
		gens := []iter.Seq2[string, error]{gen(r), gen(r)}
		out := make([]imCall, 2)
		var wg sync.WaitGroup
		for i := range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				res, err := idem.Each(ctx, s, p.key, gens[i], p.fn, opts(op.workers[i])...)
				out[i] = imCall{res, err}
			}()
		}
		wg.Wait()
		calls = out
	}
	return calls, fault
}

// imCheckErrors checks the errors of op's calls against what could end
// them: a stop only where op crashes, a store error only where the store
// failed (fault), an unknown outcome only at most once, and an error only
// with the outcome of a failure. It records the items the calls report
// parked, and says whether a call was stopped (crashed) or ended by the
// store's error (failed); msg is the first broken promise ("" when none).
func imCheckErrors(p *imPeriod, op imOp, calls []imCall, fault *storeFault) (crashed, failed bool, msg string) {
	m := modes[p.mode]
	for _, c := range calls {
		// (A stopped call stands for a process that died: it reports
		// nothing anyone reads.)
		if o := c.res.Outcome; c.err != nil && !errors.Is(c.err, ErrCrashed) && (o == 0 || o == idem.Ran || o == idem.AlreadyDone || o == idem.Recovered || o == idem.Skipped) {
			return crashed, failed, fmt.Sprintf("Each returned %v with outcome %s: an error needs the outcome of a failure", c.err, o)
		}
		switch {
		case errors.Is(c.err, ErrCrashed):
			if op.crashAt == "" {
				return crashed, failed, fmt.Sprintf("ErrCrashed from a call that was not stopped: %v", c.err)
			}
			crashed = true
		case errors.Is(c.err, errTransient):
			if fault == nil || fault.fired() == "" {
				return crashed, failed, fmt.Sprintf("a store error from a call whose store did not fail: %v", c.err)
			}
			failed = true
		case c.err != nil && !(m.name == "at-most-once" && errors.Is(c.err, idem.ErrUnknownOutcome)):
			return crashed, failed, fmt.Sprintf("Each: %v (outcome %s, counts %+v)", c.err, c.res.Outcome, c.res.Counts)
		}
		for _, it := range c.res.Parked {
			if _, ok := p.kinds[it]; !ok {
				return crashed, failed, fmt.Sprintf("Each reported %q parked, which is not an item of the period", it)
			}
			p.parked[it] = true
		}
	}
	return crashed, failed, ""
}

// imCheckSettled checks the calls that returned (none was stopped, none
// ended by a store error): one that returned nil completed the period
// (Ran or AlreadyDone), and each left every item settled, with an error
// exactly when some are unknown. A done period whose count failed (fault)
// is done with no counts.
func imCheckSettled(p *imPeriod, calls []imCall, fault *storeFault) string {
	for _, c := range calls {
		if c.err == nil {
			if c.res.Outcome != idem.Ran && c.res.Outcome != idem.AlreadyDone {
				return fmt.Sprintf("Each returned nil with outcome %s", c.res.Outcome)
			}
			p.done = true
		}
		// A call that returned (not stopped) left every item settled.
		cn := c.res.Counts
		if c.err == nil && c.res.Outcome == idem.AlreadyDone && fault != nil && fault.fired() == "CountItems" {
			// A done period whose count failed: done all the same, with
			// no counts.
			if cn != (idem.ItemCounts{}) {
				return fmt.Sprintf("Each of a done period whose count failed reported counts %+v", cn)
			}
			continue
		}
		if cn.Total() != int64(len(p.items)) || cn.Pending+cn.Running+cn.Failed != 0 {
			return fmt.Sprintf("Each returned (%v) with counts %+v: want all %d items settled", c.err, cn, len(p.items))
		}
		if (cn.Unknown > 0) != (c.err != nil) {
			return fmt.Sprintf("Each returned %v with %d items unknown", c.err, cn.Unknown)
		}
	}
	return ""
}

func cloneCounts(m map[string]int) map[string]int {
	c := make(map[string]int, len(m))
	for k, v := range m {
		c[k] = v
	}
	return c
}

func sum(m map[string]int) (n int) {
	for _, v := range m {
		n += v
	}
	return n
}

// checkPeriods checks every period's store counts and items against the
// modes' promises; final adds what must hold once a period was run, after
// every lease ended, to its end.
func checkPeriods(s idemstore.ItemStore, ps []*imPeriod, final bool) string {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, p := range ps {
		m := modes[p.mode].name
		cn, err := s.CountItems(ctx, p.key)
		if err != nil {
			return fmt.Sprintf("%s: CountItems: %v", p.key, err)
		}
		rec, ok, err := s.Lookup(ctx, p.key)
		if err != nil {
			return fmt.Sprintf("%s: Lookup: %v", p.key, err)
		}
		periodDone := ok && rec.Status == idem.StatusDone
		if p.done && !periodDone {
			return fmt.Sprintf("%s: Each reported the period completed, but its record is %+v (found %v)", p.key, rec, ok)
		}
		if cn.Total() > int64(len(p.items)) {
			return fmt.Sprintf("%s: %d items counted, the period has %d", p.key, cn.Total(), len(p.items))
		}
		// Settled items stay settled: done, parked and unknown never go down.
		l := p.last
		if cn.Done < l.Done || cn.Parked < l.Parked || cn.Unknown < l.Unknown || cn.Total() < l.Total() {
			return fmt.Sprintf("%s: counts went back: %+v, then %+v", p.key, l, cn)
		}
		p.last = cn
		if periodDone && (cn.Total() != int64(len(p.items)) || cn.Done+cn.Parked != cn.Total()) {
			return fmt.Sprintf("%s: the period is done with counts %+v (%d items)", p.key, cn, len(p.items))
		}
		p.mu.Lock()
		calls, effects := cloneCounts(p.calls), cloneCounts(p.effects)
		// Each stop and each stall ends a holder's leases: its items run
		// again (at least once), are checked (two-phase) or become
		// unknown (at most once), and count a failure.
		interrupted := p.crashes + p.stalls
		p.mu.Unlock()
		parks := 0
		var missing []string // items that never took effect
		for _, id := range p.items {
			k, c, e := p.kinds[id], calls[id], effects[id]
			if k.parks() {
				parks++
			}
			switch {
			case m != "at-least-once" && e > 1:
				return fmt.Sprintf("%s: %s (%s) took effect %d times in %s", p.key, id, k, e, m)
			case c > imTries+interrupted:
				return fmt.Sprintf("%s: %s (%s) ran %d times: more than %d attempts and %d stopped calls or stalls", p.key, id, k, c, imTries, interrupted)
			case interrupted == 0 && (k == itOK && c > 1 || k == itPermanent && c > 1 || k.doubtful() && m == "at-most-once" && c > 1):
				return fmt.Sprintf("%s: %s (%s) ran %d times with no call stopped or stalled", p.key, id, k, c)
			case p.parked[id] && !k.parks() && interrupted == 0:
				return fmt.Sprintf("%s: %s (%s) reported parked with no call stopped or stalled", p.key, id, k)
			case k.parks() && e > 0:
				return fmt.Sprintf("%s: %s (%s) took effect", p.key, id, k)
			case !k.parks() && e == 0:
				missing = append(missing, id)
			}
		}
		if periodDone && cn.Parked < int64(parks) {
			return fmt.Sprintf("%s: the period is done with %d items parked; %d always fail", p.key, cn.Parked, parks)
		}
		// In a done period every item that does not always fail took
		// effect, except (at-least-once, two-phase) those that stopped
		// calls parked: each stopped call counts a failure for the
		// items it held.
		if periodDone && m != "at-most-once" && int64(len(missing)) > cn.Parked-int64(parks) {
			return fmt.Sprintf("%s: the period is done but %v never took effect, and only %d items were parked beyond the %d that always fail",
				p.key, missing, cn.Parked-int64(parks), parks)
		}
		if periodDone && interrupted == 0 && cn.Parked != int64(parks) {
			return fmt.Sprintf("%s: the period is done with %d items parked; %d always fail, and no call was stopped or stalled", p.key, cn.Parked, parks)
		}
		if !final {
			continue
		}
		// The final call ran the period after every lease ended.
		if cn.Total() != int64(len(p.items)) || cn.Pending+cn.Running+cn.Failed != 0 {
			return fmt.Sprintf("%s: after the final call, counts %+v: want all %d items settled", p.key, cn, len(p.items))
		}
		doubtful := 0
		for _, id := range p.items {
			if p.kinds[id].doubtful() {
				doubtful++
			}
		}
		switch {
		case m != "at-most-once" && !periodDone:
			return fmt.Sprintf("%s: not done after the final call (%+v, counts %+v)", p.key, rec, cn)
		case m == "at-most-once" && cn.Unknown < int64(doubtful):
			return fmt.Sprintf("%s: %d items unknown; %d items failed with a plain error in at-most-once", p.key, cn.Unknown, doubtful)
		case m == "at-most-once" && periodDone != (cn.Unknown == 0):
			return fmt.Sprintf("%s: done %v with %d items unknown", p.key, periodDone, cn.Unknown)
		}
	}
	return ""
}

// storeFault is the op's fault of the store's calls for key.
func (op imOp) storeFault(key idem.Key) *storeFault {
	return &storeFault{key: key, method: op.faultIn, nth: op.fault, after: op.after}
}
