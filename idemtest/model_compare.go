package idemtest

// The checks of TestModel: what the model expects of an operation (mStep,
// apply), and how the store's results and whole state are compared with it
// (compare, promises, catchUpDiff).

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemstore"
	"github.com/idemgo/idem/internal/histcheck"
)

// mStep is what the model expects of an operation.
type mStep struct {
	a, b    mResult
	aInFn   bool
	cu      mCatchUpResult
	resolve resolveErr
	deleted int64
	refused bool
	struck  bool // the operation's store fault struck
	rr      mRerunResult
}

func (m *model) apply(op mOp) (st mStep) {
	m.hasFails = op.hasFails
	defer func() { m.hasFails = false }()
	switch op.kind {
	case opRun:
		if op.fault.method != "" {
			m.fault = &mFaultState{mFault: op.fault}
			defer func() { st.struck, m.fault = m.fault.struck, nil }()
		}
		st.a = m.run(op.key, queue([]mFn{op.fn}), newCrash(op.crash), false)
	case opCatchUp:
		st.cu = m.catchUp(op.cu, queue(op.fns), newCrash(op.crash))
	case opResolve:
		st.resolve, _ = m.resolve(op.key, op.to, nil)
		if st.resolve == resolveOK {
			m.byOperator[op.key] = true
		}
	case opPrune:
		st.deleted, st.refused = m.prune(op.job, op.through)
	case opClock:
		m.move(op.d)
	case opRerun:
		st.rr = m.rerun(op.req)
	case opOverlap:
		ra, f := m.begin(op.key, nil, false)
		if op.req.id != "" {
			st.rr = m.rerun(op.req)
		}
		if op.d > 0 {
			m.move(op.d)
		}
		st.b = m.run(op.keyB, queue([]mFn{op.fn}), newCrash(op.crash), false)
		st.a = ra
		if f != nil {
			st.aInFn = true
			st.a = m.resume(f, op.noCheck)
		}
	}
	return st
}

// count tallies what the model expected of op.
func (st mStep) count(op mOp, tally map[string]int) {
	switch op.kind {
	case opRun:
		tally["run:"+st.a.String()]++
		if st.struck {
			tally["store fault:"+strings.TrimPrefix(op.fault.String(), " fault=")]++
		}
	case opOverlap:
		tally["overlap-A:"+st.a.String()]++
		tally["overlap-B:"+st.b.String()]++
		if op.req.id != "" {
			st.rr.count("overlap-rerun", tally)
		}
	case opRerun:
		st.rr.count("rerun", tally)
	case opCatchUp:
		tally["catch-up"]++
		if st.cu.panicked {
			tally["catch-up:fn's panic"]++
		}
		for i, p := range st.cu.periods {
			o := p.outcome.String()
			if p.crashed {
				o = "crashed (ErrCrashed)"
			}
			if i < st.cu.reruns {
				tally["catch-up-rerun:"+o]++
				continue
			}
			tally["catch-up-period:"+o]++
		}
	case opResolve:
		tally[fmt.Sprintf("resolve:%v", map[resolveErr]string{resolveOK: "ok", resolveNot: "not-resolvable", resolveOutOfOrder: "out-of-order"}[st.resolve])]++
	case opPrune:
		if st.refused {
			tally["prune:refused"]++
		} else {
			tally["prune:ok"]++
		}
	case opClock:
		tally["clock"]++
	}
}

func (r mResult) String() string {
	switch {
	case r.crashed:
		return "crashed (ErrCrashed)"
	case r.panicked:
		return "fn's panic"
	}
	return r.outcome.String()
}

func (r rResult) String() string {
	s := r.outcome.String()
	switch {
	case r.crashed:
		s = "crashed (ErrCrashed)"
	case r.panicked:
		s = "fn's panic"
	}
	if r.err != nil && !r.crashed {
		s += " (" + r.err.Error() + ")"
	}
	return s
}

// resultDiff compares a run's end with the model's.
func resultDiff(what string, want mResult, got rResult) string {
	switch {
	case got.bad != "":
		return fmt.Sprintf("%s: want %s, got %s", what, want, got.bad)
	case want.crashed != got.crashed || want.panicked != got.panicked:
	case want.crashed || want.panicked:
		return ""
	case want.outcome != got.outcome || (got.err == nil) != want.ok():
	default:
		return ""
	}
	return fmt.Sprintf("%s: want %s, got %s", what, want, got)
}

func recString(r mRec, ok bool, times bool) string {
	if !ok {
		return "no record"
	}
	s := fmt.Sprintf("%s attempt=%d failures=%d", r.status, r.attempt, r.failures)
	if r.revision > 0 {
		s += fmt.Sprintf(" revision=%d", r.revision)
	}
	if times {
		if !r.leaseUntil.IsZero() {
			s += " lease-until=" + r.leaseUntil.UTC().Format(time.RFC3339)
		}
		if !r.notBefore.IsZero() {
			s += " not-before=" + r.notBefore.UTC().Format(time.RFC3339)
		}
	}
	return s
}

func fromRecord(r idemstore.Record) mRec {
	return mRec{status: r.Status, attempt: r.Attempt, failures: r.Failures, leaseUntil: r.LeaseUntil, notBefore: r.NotBefore, revision: r.Revision}
}

// sameRec compares a store's record with the model's. The times of a store
// on its own clock are its own: only whether they are set is compared.
func (w *world) sameRec(want mRec, wantOK bool, got mRec, gotOK bool) bool {
	if wantOK != gotOK {
		return false
	}
	if !wantOK {
		return true
	}
	if want.status != got.status || want.attempt != got.attempt || want.failures != got.failures || want.revision != got.revision {
		return false
	}
	if w.h.Shift != nil {
		return want.leaseUntil.IsZero() == got.leaseUntil.IsZero() && want.notBefore.IsZero() == got.notBefore.IsZero()
	}
	return want.leaseUntil.Equal(got.leaseUntil) && want.notBefore.Equal(got.notBefore)
}

// compare checks the operation's results and the store's whole state
// against the model, and returns what differs.
func (w *world) compare(ctx context.Context, m *model, op mOp, want mStep, got rStep) []string {
	var d []string
	// The operation's own results.
	opD, touched := w.opDiff(m, op, want, got)
	d = append(d, opD...)
	if got := w.clk.Now(); !got.Equal(m.now) {
		d = append(d, fmt.Sprintf("clock: the model is at %s, the Runs' clock at %s", m.now.Format(time.RFC3339), got.Format(time.RFC3339)))
	}
	// Every record.
	times := w.h.Shift == nil
	listD, unlisted := w.listDiff(ctx, m, times)
	d = append(d, listD...)
	touched = append(touched, unlisted...)
	// The business writes, read once: the promises of RunTx's keys below
	// and the count of every key at the end compare with them.
	var rows map[idem.Key]int
	rowsOK := false
	if w.h.Tx != nil {
		var err error
		if rows, err = w.h.Tx.Rows(ctx, w.s); err != nil {
			d = append(d, fmt.Sprintf("business rows: %v", err))
		}
		rowsOK = err == nil
	}
	// Lookup of the keys the operation touched, and a probe.
	slices.SortFunc(touched, keyOrder)
	touched = slices.Compact(touched)
	d = append(d, w.lookupDiff(ctx, m, touched, times, rows, rowsOK)...)
	d = append(d, w.jobDiff(ctx, m, op, touched)...)
	// The effects, and the business writes.
	w.mu.Lock()
	eff := maps(w.effects)
	w.mu.Unlock()
	d = append(d, countDiff("effects of fn", m.effects, eff)...)
	if rowsOK {
		d = append(d, countDiff("business rows", m.rows, rows)...)
	}
	return d
}

// opDiff compares what op returned (got) with what the model says it
// returns (want), and returns the differences and the keys op touched
// (with its probe), whose records compare after it.
func (w *world) opDiff(m *model, op mOp, want mStep, got rStep) (d []string, touched []idem.Key) {
	add := func(s string) {
		if s != "" {
			d = append(d, s)
		}
	}
	touched = []idem.Key{op.probe}
	switch op.kind {
	case opRun:
		add(resultDiff("Run "+op.key.String(), want.a, got.a))
		touched = append(touched, op.key)
	case opOverlap:
		if want.aInFn != got.aInFn {
			add(fmt.Sprintf("overlap: A reached fn: want %v, got %v", want.aInFn, got.aInFn))
		}
		add(resultDiff("overlap: A's Run "+op.key.String(), want.a, got.a))
		add(resultDiff("overlap: B's Run "+op.keyB.String(), want.b, got.b))
		touched = append(touched, op.key, op.keyB)
		if op.req.id != "" {
			add(rerunDiff(op.req, want.rr, got.rr, got.rrErr))
			touched = append(touched, op.req.keys...)
			d = append(d, w.rerunsDueDiff(context.Background(), m, op.req.keys)...)
		}
	case opRerun:
		add(rerunDiff(op.req, want.rr, got.rr, got.rrErr))
		touched = append(touched, op.req.keys...)
		d = append(d, w.rerunsDueDiff(context.Background(), m, op.req.keys)...)
	case opCatchUp:
		d = append(d, w.catchUpDiff(m, op, want.cu, got.cu)...)
		for _, p := range want.cu.periods {
			touched = append(touched, idem.Key{Job: op.cu.job, Period: p.period})
		}
	case opResolve:
		wantErr := map[resolveErr]error{resolveNot: idem.ErrNotResolvable, resolveOutOfOrder: idem.ErrOutOfOrder}[want.resolve]
		if (wantErr == nil) != (got.resolve == nil) || (wantErr != nil && !errors.Is(got.resolve, wantErr)) {
			add(fmt.Sprintf("Resolve %s: want error %v, got %v", op.key, wantErr, got.resolve))
		}
		touched = append(touched, op.key)
	case opPrune:
		switch {
		case want.refused && !errors.Is(got.prune, idem.ErrPruneRefused):
			add(fmt.Sprintf("Prune %s through %s: want ErrPruneRefused, got %v (deleted %d)", op.job, op.through, got.prune, got.deleted))
		case !want.refused && (got.prune != nil || got.deleted != want.deleted):
			add(fmt.Sprintf("Prune %s through %s: want %d deleted, got %d, %v", op.job, op.through, want.deleted, got.deleted, got.prune))
		}
	}
	return d, touched
}

// listDiff compares every record the store lists with the model's (times:
// compare their times too), and checks that no attempt number went back.
// A store that cannot list (no idemstore.Lister) has its records compared
// by Lookup instead: listDiff returns the model's keys for that.
func (w *world) listDiff(ctx context.Context, m *model, times bool) (d []string, unlisted []idem.Key) {
	wantRecs := m.records()
	ls, ok := w.s.(idemstore.Lister)
	if !ok {
		for k := range wantRecs {
			unlisted = append(unlisted, k)
		}
		return nil, unlisted
	}
	recs, err := ls.List(ctx, idemstore.Filter{})
	if err != nil {
		d = append(d, fmt.Sprintf("List: %v", err))
	}
	gotRecs := map[idem.Key]mRec{}
	for _, r := range recs {
		gotRecs[r.Key] = fromRecord(r)
		if r.Attempt < w.seen[r.Key] {
			d = append(d, fmt.Sprintf("%s: attempt number went back from %d to %d", r.Key, w.seen[r.Key], r.Attempt))
		}
		w.seen[r.Key] = max(w.seen[r.Key], r.Attempt)
	}
	for _, k := range sortedKeys(wantRecs, gotRecs) {
		wr, wok := wantRecs[k]
		gr, gok := gotRecs[k]
		if !w.sameRec(wr, wok, gr, gok) {
			d = append(d, fmt.Sprintf("List %s: want %s, got %s", k, recString(wr, wok, times), recString(gr, gok, times)))
		}
	}
	return d, nil
}

// lookupDiff compares the store's Lookup of each key (sorted, each once)
// with the model's, and checks the promises of its record (promises; rows
// are the business writes, when rowsOK).
func (w *world) lookupDiff(ctx context.Context, m *model, keys []idem.Key, times bool, rows map[idem.Key]int, rowsOK bool) (d []string) {
	for _, k := range keys {
		if k.Job == "" {
			continue
		}
		wr, wok := m.lookup(k)
		gr, gok, err := w.s.Lookup(ctx, k)
		if err != nil {
			d = append(d, fmt.Sprintf("Lookup %s: %v", k, err))
			continue
		}
		if !w.sameRec(wr, wok, fromRecord(gr), gok) {
			d = append(d, fmt.Sprintf("Lookup %s: want %s, got %s", k, recString(wr, wok, times), recString(fromRecord(gr), gok, times)))
		}
		d = append(d, w.promises(m, k, gr, gok, rows, rowsOK)...)
		d = append(d, w.historyDiff(ctx, m, k, gr, gok)...)
	}
	return d
}

// historyDiff checks a store's History of k (when it keeps one:
// idemstore.Historian) against its record (histcheck.Check), and that the
// record's own ended attempt has the record's status as its outcome unless
// an operator settled it since (or a re-run: another revision).
func (w *world) historyDiff(ctx context.Context, m *model, k idem.Key, rec idemstore.Record, ok bool) []string {
	hs, isH := w.s.(idemstore.Historian)
	if !isH {
		return nil
	}
	h, err := hs.History(ctx, k)
	if err != nil {
		return []string{fmt.Sprintf("History %s: %v", k, err)}
	}
	var d []string
	for _, p := range histcheck.Check(rec, ok, h) {
		d = append(d, fmt.Sprintf("History %s: %s", k, p))
	}
	if n := len(h.Attempts); ok && n > 0 && !m.byOperator[k] && rec.Status != idem.StatusSkipped && rec.Status != idem.StatusRunning {
		if a := h.Attempts[n-1]; a.Attempt == rec.Attempt && a.Revision == rec.Revision && a.Outcome != string(rec.Status) {
			d = append(d, fmt.Sprintf("History %s: attempt %d ended %s, the record says %s", k, a.Attempt, a.Outcome, rec.Status))
		}
	}
	return d
}

// jobDiff compares the cursor and horizon of the jobs op touched (the jobs
// of the keys touched) and of one more in turn with the model's: an
// operation changes only its own job's.
func (w *world) jobDiff(ctx context.Context, m *model, op mOp, touched []idem.Key) (d []string) {
	if w.cs == nil {
		return nil
	}
	jobs := []string{w.cfg.jobs[w.steps%len(w.cfg.jobs)], op.cu.job, op.job}
	for _, k := range touched {
		jobs = append(jobs, k.Job)
	}
	slices.Sort(jobs)
	for _, job := range slices.Compact(jobs) {
		if job == "" {
			continue
		}
		js, err := w.cs.Job(ctx, job)
		if err != nil {
			d = append(d, fmt.Sprintf("Job %s: %v", job, err))
			continue
		}
		cursor, horizon := m.jobState(job)
		if js.Cursor != cursor || js.Horizon != horizon {
			d = append(d, fmt.Sprintf("Job %s: want cursor %q horizon %q, got cursor %q horizon %q", job, cursor, horizon, js.Cursor, js.Horizon))
		}
	}
	return d
}

func maps(m map[idem.Key]int) map[idem.Key]int {
	out := make(map[idem.Key]int, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

func sortedKeys[V any](a, b map[idem.Key]V) []idem.Key {
	var ks []idem.Key
	for k := range a {
		ks = append(ks, k)
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			ks = append(ks, k)
		}
	}
	slices.SortFunc(ks, keyOrder)
	return ks
}

func keyOrder(a, b idem.Key) int {
	if c := strings.Compare(a.Job, b.Job); c != 0 {
		return c
	}
	return strings.Compare(a.Period, b.Period)
}

func countDiff(what string, want, got map[idem.Key]int) []string {
	var d []string
	for _, k := range sortedKeys(want, got) {
		if want[k] != got[k] {
			d = append(d, fmt.Sprintf("%s %s: want %d, got %d", what, k, want[k], got[k]))
		}
	}
	return d
}

// promises checks each mode's promise on the store's own answer for k (its
// record, the effects, the business rows), for keys a run settled and no
// operator overrode. rows are the business rows, when rowsOK (read
// without error).
func (w *world) promises(m *model, k idem.Key, rec idemstore.Record, ok bool, rows map[idem.Key]int, rowsOK bool) []string {
	if m.byOperator[k] || (!m.wm && ok && m.recs[k] == nil) {
		return nil // settled by an operator; or pruned, its revision forgotten
	}
	// Each mode's promise holds per revision (a re-run's fn runs once
	// more as its mode promises): the effects of the record's revision.
	done := ok && rec.Status == idem.StatusDone && m.byRun[k]
	n := w.countRev(k, rec.Revision)
	var d []string
	broken := func(format string, a ...any) {
		d = append(d, fmt.Sprintf("PROMISE BROKEN: %s %s: ", k, w.cfg.modes[k.Job])+fmt.Sprintf(format, a...))
	}
	switch w.cfg.modes[k.Job] {
	case modeALO:
		if done && n < 1 {
			broken("done with %d effects (revision %d)", n, rec.Revision)
		}
	case modeAMO:
		if n > 1 {
			broken("%d effects (revision %d)", n, rec.Revision)
		}
	case modeTP:
		if n > 1 || (done && n != 1) {
			broken("%s with %d effects (revision %d)", rec.Status, n, rec.Revision)
		}
	case modeTx:
		if !rowsOK {
			return nil // compare reports the error of their read
		}
		n := rows[k] - m.rowsBase[k] // the revision's
		if n > 1 || (done && n != 1) || (ok && rec.Status != idem.StatusDone && n != 0) {
			broken("%s with %d business rows (revision %d)", rec.Status, n, rec.Revision)
		}
	}
	return d
}

func (w *world) catchUpDiff(m *model, op mOp, want mCatchUpResult, got rCatchUp) []string {
	var d []string
	name := "CatchUp " + op.cu.job
	if got.bad != "" {
		return []string{name + ": " + got.bad}
	}
	if want.panicked != got.panicked {
		return []string{fmt.Sprintf("%s: fn's panic: want %v, got %v (%v)", name, want.panicked, got.panicked, got.err)}
	}
	if want.panicked {
		return nil
	}
	ps := got.res.Periods
	var gotS, wantS []string
	for _, p := range want.periods {
		s := p.period + ":" + p.outcome.String()
		if p.crashed {
			s = p.period + ":crashed"
		}
		wantS = append(wantS, s)
	}
	same := len(ps) == len(want.periods)
	for i, p := range ps {
		crashed := errors.Is(p.Err, ErrCrashed)
		s := p.Period.Name + ":" + p.Outcome.String()
		if crashed {
			s = p.Period.Name + ":crashed"
		}
		gotS = append(gotS, s)
		if same {
			wp := want.periods[i]
			if p.Period.Name != wp.period || (p.Err != nil) != wp.err || crashed != wp.crashed || (!crashed && p.Outcome != wp.outcome) {
				same = false
			}
		}
	}
	if !same {
		d = append(d, fmt.Sprintf("%s periods: want [%s], got [%s] (error: %v)", name, strings.Join(wantS, " "), strings.Join(gotS, " "), got.err))
	}
	if got.res.Deferred != want.deferred {
		d = append(d, fmt.Sprintf("%s deferred: want %d, got %d", name, want.deferred, got.res.Deferred))
	}
	if got.res.Cursor != want.cursor {
		d = append(d, fmt.Sprintf("%s result's cursor: want %q, got %q", name, want.cursor, got.res.Cursor))
	}
	if (got.err != nil) != want.err {
		d = append(d, fmt.Sprintf("%s error: want error %v, got %v", name, want.err, got.err))
	}
	return d
}
