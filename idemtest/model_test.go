package idemtest_test

import (
	"context"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemtest"
	"github.com/idemgo/idem/internal/testledger"
)

// wrongAttempt is a state file whose Lookup reports every record's attempt
// off by 100: a store that diverges from the model as soon as a key it
// looks up has a record.
type wrongAttempt struct{ testledger.StateStore }

func (s wrongAttempt) Lookup(ctx context.Context, k idem.Key) (idem.Record, bool, error) {
	rec, ok, err := s.StateStore.Lookup(ctx, k)
	if ok {
		rec.Attempt += 100
	}
	return rec, ok, err
}

// TestModelParallel: with ModelOptions.Parallel, TestModel runs its
// sequences at once (as many as go test's -parallel allows, GOMAXPROCS by
// default: the harness opens that many stores before any sequence goes
// on), and of several failing sequences reports and shrinks the first in
// seed order. The model runs in a child process, whose test fails; this
// test reads its output.
func TestModelParallel(t *testing.T) {
	t.Parallel()
	const sequences = 4
	if idemtest.IsChild(t) {
		atOnce := min(sequences, runtime.GOMAXPROCS(0)) // the child's -parallel
		var mu sync.Mutex
		opened := 0
		all := make(chan struct{})
		h := idemtest.Harness{
			Watermark: true,
			Open: func(t *testing.T, clk idem.Clock) idem.Store {
				s, err := idem.OpenStateFile(filepath.Join(t.TempDir(), "state.json"), idem.WithClock(clk))
				if err != nil {
					t.Fatal(err)
				}
				mu.Lock()
				if opened++; opened == atOnce {
					close(all)
				}
				mu.Unlock()
				timer := time.NewTimer(time.Minute)
				defer timer.Stop()
				select {
				case <-all:
				case <-timer.C:
					t.Fatalf("waited a minute for %d sequences to open their stores at once", atOnce)
				}
				return wrongAttempt{testledger.StateSPI(t, s)}
			},
		}
		idemtest.TestModel(t, h, idemtest.ModelOptions{Ops: sequences * 20, Len: 20, Seed: 1000, Parallel: true})
		return
	}
	e := idemtest.Start(t, "", nil).Wait()
	if e.Code != 1 || e.Killed {
		t.Fatalf("the child: %+v; want its test failed (exit code 1)", e)
	}
	for _, want := range []string{
		"model: the store diverged from the model at step",
		"of the sequence of seed 1000\n",
		"model: shrunk to",
		"attempt=10", // the off-by-100 attempt
	} {
		if !strings.Contains(e.Output, want) {
			t.Errorf("the child's output lacks %q:\n%s", want, e.Output)
		}
	}
	for _, unwanted := range []string{"the harness's Open failed", "at once", "seed 1001", "seed 1002", "seed 1003"} {
		if strings.Contains(e.Output, unwanted) {
			t.Errorf("the child's output has %q:\n%s", unwanted, e.Output)
		}
	}
}
