package idemtest

// A failure of TestModel reported: the seed and step, then the sequence
// shrunk (delta debugging, then each operation simplified) to the shortest
// one that still fails.

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

// reportFailure prints the failing sequence's seed and step, shrinks it,
// and prints the shortest failing sequence found.
func reportFailure(t *testing.T, h Harness, cfg *modelConfig, o ModelOptions, seed uint64, r seqResult) {
	f := r.fail
	t.Errorf("model: the store diverged from the model at step %d of the sequence of seed %d\n"+
		"reproduce: IDEM_MODEL_SEED=%d IDEM_MODEL_OPS=%d IDEM_MODEL_LEN=%d\n"+
		"operation: %s\n%s",
		f.step, seed, seed, f.step, f.step, f.op, indent(f.diffs))
	ops, last, replays := shrink(t, h, cfg, o, r)
	var b strings.Builder
	fmt.Fprintf(&b, "model: shrunk to %d operations (%d replays); it still fails at its last step:\n", len(ops), replays)
	for i, op := range ops {
		fmt.Fprintf(&b, "  %3d. [%s] %s\n", i+1, last.at[i].UTC().Format("2006-01-02 15:04"), op)
	}
	b.WriteString(indent(last.fail.diffs))
	t.Error(b.String())
}

func indent(lines []string) string {
	var b strings.Builder
	for _, l := range lines {
		b.WriteString("    " + strings.ReplaceAll(l, "\n", "\n    ") + "\n")
	}
	return b.String()
}

// shrink removes operations (delta debugging) while the sequence still
// fails, within a budget of replays and time.
func shrink(t *testing.T, h Harness, cfg *modelConfig, o ModelOptions, r seqResult) ([]mOp, seqResult, int) {
	cur, last := r.ops, r
	replays := 0
	deadline := time.Now().Add(5 * time.Minute)
	n := 2
	for len(cur) > 1 && replays < 1000 && time.Now().Before(deadline) {
		chunk := (len(cur) + n - 1) / n
		reduced := false
		for i := 0; i < len(cur) && replays < 1000 && time.Now().Before(deadline); i += chunk {
			cand := append(append([]mOp(nil), cur[:i]...), cur[min(i+chunk, len(cur)):]...)
			replays++
			rr := runSequence(t, h, cfg, o, 0, 0, cand)
			if sameFailure(rr, r) {
				cur, last = rr.ops, *rr
				n = max(n-1, 2)
				reduced = true
				break
			}
		}
		if !reduced {
			if chunk == 1 {
				break
			}
			n = min(2*n, len(cur))
		}
	}
	// Then simplify what is left, one operation at a time.
	for i := 0; i < len(cur) && replays < 1000 && time.Now().Before(deadline); i++ {
		for changed := true; changed; { // each candidate is simpler than cur[i]: this ends
			changed = false
			for _, op := range simpler(cur[i]) {
				cand := slices.Clone(cur)
				cand[i] = op
				replays++
				if rr := runSequence(t, h, cfg, o, 0, 0, cand); rr.fail != nil && len(rr.ops) == len(cur) {
					cur, last, changed = rr.ops, *rr, true
					break
				}
			}
		}
	}
	return cur, last, replays
}

// sameFailure reports whether a replay failed at the operation the
// sequence first failed at (a shorter sequence may fail elsewhere for a
// reason of its own: an operation drawn for a clock that it no longer
// reaches, Since in the future, say).
func sameFailure(rr *seqResult, r seqResult) bool {
	return rr.fail != nil && rr.fail.op.String() == r.fail.op.String()
}

// simpler returns simpler versions of op, simplest first: without its
// crash, without its store fault, without a failing TwoPhase check, with fewer catch-up fns.
func simpler(op mOp) []mOp {
	var out []mOp
	if op.crash.point != "" {
		o := op
		o.crash = mCrash{}
		out = append(out, o)
	}
	if op.fault.method != "" {
		o := op
		o.fault = mFault{}
		out = append(out, o)
	}
	if op.hasFails {
		o := op
		o.hasFails = false
		out = append(out, o)
	}
	for n := range len(op.fns) {
		o := op
		o.fns = op.fns[:n]
		out = append(out, o)
	}
	return out
}
