package idemtest

// Re-runs of done periods in TestModel (idem.Rerun, on a store that is an
// idemstore.Rerunner): the model of a request (rerun), of the done mark
// that makes a pending request's revision (promote) and of RerunsDue; the
// request run on the store and compared.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemstore"
)

// mRerun is a re-run request of an operation.
type mRerun struct {
	id   string
	keys []idem.Key
}

func (r mRerun) String() string {
	ks := make([]string, len(r.keys))
	for i, k := range r.keys {
		ks[i] = k.String()
	}
	return fmt.Sprintf("Rerun request=%s [%s]", r.id, strings.Join(ks, " "))
}

// mRerunResult is what the model expects of a request: refused (nothing
// changed), or an outcome per key.
type mRerunResult struct {
	refused  bool
	outcomes []idemstore.RerunOutcome
}

func (r mRerunResult) String() string {
	if r.refused {
		return "refused (ErrNotRerunnable)"
	}
	s := make([]string, len(r.outcomes))
	for i, o := range r.outcomes {
		s[i] = fmt.Sprintf("%s:%s@%d", o.Key, o.State, o.Revision)
	}
	return strings.Join(s, " ")
}

// rerun is idemstore.Rerunner.Rerun: for every key or for none. A request
// id recorded for any of its keys before: every key RerunSeen (at the
// revision recorded for it, or its record's), nothing written. A key that
// never ran (or was pruned), is parked or unknown refuses the whole
// request. Done or skipped: a new revision, failed and runnable at once
// (RerunQueued). Running: the attempt's done mark makes the new revision
// (RerunAfterRun; requests while it runs share it). Failed: it runs again
// anyway (RerunDue, the revision it has).
func (m *model) rerun(req mRerun) mRerunResult {
	sent := false
	for _, k := range req.keys {
		if _, seen := m.reruns[k][req.id]; seen {
			sent = true
		}
	}
	if sent {
		// Sent before: every key is seen, even one the request did not
		// name then; nothing is refused, nothing written.
		var res mRerunResult
		for _, k := range req.keys {
			o := idemstore.RerunOutcome{Key: k, State: idemstore.RerunSeen}
			if rev, seen := m.reruns[k][req.id]; seen {
				o.Revision = rev
			} else if r := m.recs[k]; r != nil {
				o.Revision = r.revision
			}
			res.outcomes = append(res.outcomes, o)
		}
		return res
	}
	for _, k := range req.keys {
		rec, found := m.lookup(k)
		if _, kept := m.recs[k]; !found || !kept || rec.status == idem.StatusParked || rec.status == idem.StatusUnknown {
			return mRerunResult{refused: true}
		}
	}
	var res mRerunResult
	for _, k := range req.keys {
		o := idemstore.RerunOutcome{Key: k}
		if rev, seen := m.reruns[k][req.id]; seen {
			o.State, o.Revision = idemstore.RerunSeen, rev
			res.outcomes = append(res.outcomes, o)
			continue
		}
		r := m.recs[k]
		switch r.status {
		case idem.StatusDone, idem.StatusSkipped:
			o.State, o.Revision = idemstore.RerunQueued, r.revision+1
			m.newRevision(k, o.Revision)
		case idem.StatusRunning:
			o.State, o.Revision = idemstore.RerunAfterRun, r.revision+1
			m.pending[k] = o.Revision
		default:
			o.State, o.Revision = idemstore.RerunDue, r.revision
		}
		if m.reruns[k] == nil {
			m.reruns[k] = map[string]int64{}
		}
		m.reruns[k][req.id] = o.Revision
		res.outcomes = append(res.outcomes, o)
	}
	return res
}

// newRevision makes k's record revision rev: failed, runnable at once; the
// effects and rows so far are the earlier revisions'.
func (m *model) newRevision(k idem.Key, rev int64) {
	r := m.recs[k]
	r.status, r.revision, r.failures = idem.StatusFailed, rev, 0
	r.notBefore, r.leaseUntil = time.Time{}, time.Time{}
	m.effBase[k], m.rowsBase[k] = m.effects[k], m.rows[k]
	delete(m.pending, k)
}

// doneWithPending reports whether a request waits for an attempt's done
// mark on k while k is done (an operator resolved it done: whether that
// promotes the request is not decided, the stores differ). A skipped
// period with a waiting request is not left out: a new revision answers
// that request, in every store.
func (m *model) doneWithPending(k idem.Key) bool {
	r := m.recs[k]
	return m.pending[k] > 0 && r != nil && r.status == idem.StatusDone
}

// stalePending reports whether a request waits for an attempt's done mark
// on k while k is not running (an operator or a catch-up settled it
// otherwise).
func (m *model) stalePending(k idem.Key) bool {
	r := m.recs[k]
	return m.pending[k] > 0 && r != nil && r.status != idem.StatusRunning && r.status != idem.StatusFailed
}

// promote is the done mark of k (a run's, or Resolve's) when a request
// came while an attempt held it: the record becomes that revision.
func (m *model) promote(k idem.Key) {
	if rev := m.pending[k]; rev > 0 && m.recs[k] != nil && m.recs[k].status == idem.StatusDone {
		m.newRevision(k, rev)
	}
}

// rerunsDue is idemstore.Rerunner.RerunsDue: the job's periods at or
// before through with a request recorded and a re-run revision still to
// run (failed or running), oldest first.
func (m *model) rerunsDue(job, through string) []string {
	var out []string
	for k, ids := range m.reruns {
		r := m.recs[k]
		if k.Job != job || k.Period > through || len(ids) == 0 || r == nil || r.revision == 0 {
			continue
		}
		if r.status == idem.StatusFailed || r.status == idem.StatusRunning {
			out = append(out, k.Period)
		}
	}
	slices.Sort(out)
	return out
}

// rerunReal sends req to the store.
func (w *world) rerunReal(ctx context.Context, req mRerun) ([]idemstore.RerunOutcome, error) {
	rr, ok := w.s.(idemstore.Rerunner)
	if !ok {
		return nil, fmt.Errorf("idemtest: model: %T is not an idemstore.Rerunner", w.s)
	}
	return rr.Rerun(ctx, idemstore.RerunRequest{Keys: req.keys, RequestID: req.id, Reason: "model", By: "idemtest", Now: w.clk.Now()})
}

// rerunDiff compares what the store answered to req with the model's.
func rerunDiff(req mRerun, want mRerunResult, got []idemstore.RerunOutcome, err error) string {
	switch {
	case want.refused && errors.Is(err, idemstore.ErrNotRerunnable) && got == nil:
		return ""
	case want.refused:
		return fmt.Sprintf("%s: want refused (ErrNotRerunnable), got %v, %v", req, rerunResultString(got), err)
	case err != nil:
		return fmt.Sprintf("%s: want %s, got error %v", req, want, err)
	case !slices.Equal(want.outcomes, got):
		return fmt.Sprintf("%s: want %s, got %s", req, want, rerunResultString(got))
	}
	return ""
}

func rerunResultString(out []idemstore.RerunOutcome) string {
	return mRerunResult{outcomes: out}.String()
}

// rerunsDueDiff compares RerunsDue of the jobs of keys, through two days
// after the model's today, with the model's.
func (w *world) rerunsDueDiff(ctx context.Context, m *model, keys []idem.Key) (d []string) {
	rr, ok := w.s.(idemstore.Rerunner)
	if !ok {
		return nil
	}
	var jobs []string
	for _, k := range keys {
		jobs = append(jobs, k.Job)
	}
	slices.Sort(jobs)
	through := addDays(day(m.now), 2)
	for _, job := range slices.Compact(jobs) {
		got, err := rr.RerunsDue(ctx, job, through)
		want := m.rerunsDue(job, through)
		if err != nil || !slices.Equal(got, want) {
			d = append(d, fmt.Sprintf("RerunsDue %s through %s: want %v, got %v (%v)", job, through, want, got, err))
		}
	}
	return d
}

// rerunReq draws a re-run request: a new id naming one to three keys of
// any job (mostly done ones), or an id sent before, as it was.
// A key that an attempt's request waits for while it is skipped (a
// catch-up skipped it after the attempt failed) is left out: whether a
// new revision answers that request is not decided (the stores differ).
func (g *gen) rerunReq() mRerun {
	if len(g.sent) > 0 && g.r.IntN(4) == 0 {
		if req := g.sent[g.r.IntN(len(g.sent))]; !slices.ContainsFunc(req.keys, g.m.stalePending) {
			return req
		}
	}
	g.nextID++
	req := mRerun{id: fmt.Sprintf("req-%d", g.nextID)}
	var done []idem.Key
	for k, r := range g.m.recs {
		if (r.status == idem.StatusDone || r.status == idem.StatusSkipped) && !g.m.doneWithPending(k) {
			done = append(done, k)
		}
	}
	slices.SortFunc(done, keyOrder)
	for range 1 + g.r.IntN(3) {
		var k idem.Key
		if len(done) > 0 && g.r.IntN(10) < 7 {
			k = done[g.r.IntN(len(done))]
		} else {
			k = g.key(g.pick(g.cfg.jobs))
		}
		if !slices.Contains(req.keys, k) && !g.m.doneWithPending(k) {
			req.keys = append(req.keys, k)
		}
	}
	if len(req.keys) == 0 {
		req.keys = []idem.Key{{Job: g.pick(g.cfg.jobs), Period: addDays(day(g.m.now), 9)}} // never ran: refused
	}
	g.sent = append(g.sent, req)
	return req
}

// count tallies the request's outcomes under name.
func (r mRerunResult) count(name string, tally map[string]int) {
	if r.refused {
		tally[name+":refused"]++
		return
	}
	for _, o := range r.outcomes {
		tally[name+":"+o.State.String()]++
	}
}
