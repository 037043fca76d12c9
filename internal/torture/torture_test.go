package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemstore"
	"github.com/idemgo/idem/internal/torture/harness"
)

// hangEnv makes a worker hang before it starts working (TestHungWorker).
const hangEnv = "IDEM_TORTURE_TEST_HANG"

// TestMain makes the test binary a worker when the parent re-executes it.
func TestMain(m *testing.M) {
	harness.Register(stuckBackend())
	if harness.IsWorker() {
		if os.Getenv(hangEnv) != "" {
			hangBeforeWork()
		}
		os.Exit(harness.RunWorker())
	}
	os.Exit(m.Run())
}

// hangBeforeWork never returns: a worker that hangs where its own watchdog
// cannot see it.
func hangBeforeWork() {
	for {
		time.Sleep(time.Hour)
	}
}

// stuckKey is the key whose Claim never returns in the "stuck" store.
var stuckKey = idem.Key{Job: "job0", Period: "2026-01-01"}

// stuckBackend is a SQLite ledger whose Claim of stuckKey never returns (it
// does not even heed its context): a store call that hangs.
func stuckBackend() *harness.Backend {
	return &harness.Backend{
		Name: "stuck",
		Open: func(ctx context.Context, dir, _ string) (*harness.Handle, error) {
			l, err := idem.OpenLedger(filepath.Join(dir, "ledger.db"))
			if err != nil {
				return nil, err
			}
			st, err := idemstore.Of(l)
			if err != nil {
				return nil, err
			}
			return &harness.Handle{Store: stuckStore{st}, Close: l.Close}, nil
		},
	}
}

type stuckStore struct{ idemstore.Store }

func (s stuckStore) Claim(ctx context.Context, req idemstore.ClaimRequest) (idemstore.Claim, error) {
	if req.Key == stuckKey {
		claimNeverReturns()
	}
	return s.Store.Claim(ctx, req)
}

func claimNeverReturns() {
	for {
		time.Sleep(time.Hour)
	}
}

// settleFor returns the Settle of one of runs runs still to do in t: a
// minute, or less so that they all end before t's deadline (go test
// -timeout) with room for the report.
func settleFor(t *testing.T, runs int, duration time.Duration) time.Duration {
	settle := time.Minute
	if dl, ok := t.Deadline(); ok {
		settle = min(settle, (time.Until(dl)-30*time.Second)/time.Duration(runs)-duration)
	}
	return max(settle, 10*time.Second)
}

// TestTorture runs a short kill -9 pass for every valid store × mode.
func TestTorture(t *testing.T) {
	combos := []struct{ store, mode string }{
		{"sqlite", "atleastonce"},
		{"sqlite", "atmostonce"},
		{"sqlite", "twophase"},
		{"sqlite", "tx"},
		{"sqlite", "outbox"},
		{"statefile", "atleastonce"},
		{"statefile", "atmostonce"},
		{"statefile", "twophase"},
	}
	for i, c := range combos {
		t.Run(c.store+"/"+c.mode, func(t *testing.T) {
			var out bytes.Buffer
			seed := time.Now().UnixNano()
			const duration = 10 * time.Second // 40 kills take a few
			s, err := harness.Run(harness.Config{
				Store: c.store, Mode: c.mode,
				Kills: 40, Keys: 300, Workers: 3,
				Seed: seed, Duration: duration, Settle: settleFor(t, len(combos)-i, duration),
				Dir: t.TempDir(), Lease: 100 * time.Millisecond,
				// A state file serializes every worker of every process
				// through one flock, which is not fair: on a machine
				// loaded far past its cores (seen at a load of 9-12 on
				// 2 cores) a worker can wait more than the default 10 s
				// for it. Stuck still means stuck, with its goroutines.
				Stall: 30 * time.Second,
				Out:   &out,
			})
			if err != nil {
				t.Fatalf("seed %d: %v\n%s", seed, err, out.String())
			}
			if s.Violations > 0 || s.Lost > 0 || len(s.Errors) > 0 {
				t.Fatalf("seed %d: violations=%d lost=%d errors=%d\n%s", seed, s.Violations, s.Lost, len(s.Errors), out.String())
			}
			if s.Effects == 0 {
				t.Fatalf("seed %d: no effects at all\n%s", seed, out.String())
			}
			t.Log(s.Line())
		})
	}
}

// TestWorkerFailureReported: workers that exit non-zero are reported as
// errors (and restarted a few times during the kill phase), not hung on.
func TestWorkerFailureReported(t *testing.T) {
	var out bytes.Buffer
	s, err := harness.Run(harness.Config{Store: "sqlite", Mode: "atleastonce", Kills: 5, Keys: 3, Workers: 2, Seed: 1,
		Duration: 5 * time.Second, Dir: t.TempDir(), Lease: 100 * time.Millisecond, Exe: "/bin/false", Out: &out})
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Errors) == 0 || s.Lost != 3 || s.Violations != 3 {
		t.Fatalf("errors=%d lost=%d violations=%d\n%s", len(s.Errors), s.Lost, s.Violations, out.String())
	}
	// The kill phase may catch a worker before /bin/false has exited, so the
	// number of kills is not fixed; the rest of the line is.
	line := s.Line()
	if !strings.HasPrefix(line, "torture: store=sqlite mode=atleastonce kills=") ||
		!strings.Contains(line, " keys=3 effects=0 duplicates=0 lost=3 unknown=0 violations=3") {
		t.Fatalf("last line %q", line)
	}
}

// TestStuckWorkerReported: a worker inside a Run that never returns (its
// store's Claim hangs) is stopped by its watchdog after Config.Stall with a
// diagnosis: the key it is in Run of, and its goroutines. The run ends with
// those as errors instead of hanging.
func TestStuckWorkerReported(t *testing.T) {
	var out bytes.Buffer
	s, err := harness.Run(harness.Config{Store: "stuck", Mode: "atleastonce", Kills: 0, Keys: 10, Workers: 2, Seed: 1,
		Duration: time.Second, Settle: time.Minute, Stall: 2 * time.Second,
		Dir: t.TempDir(), Lease: 100 * time.Millisecond, Out: &out})
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if len(s.Errors) != 2 {
		t.Fatalf("%d errors, want one per worker\n%s", len(s.Errors), out.String())
	}
	for _, e := range s.Errors {
		for _, want := range []string{
			"exited: exit status 3",
			"stuck: no key settled for",
			"in Run of " + stuckKey.String(),
			"the workers' log about job0:",
			"goroutine ",
			"claimNeverReturns", // the dump shows where it hangs
		} {
			if !strings.Contains(e, want) {
				t.Errorf("error without %q:\n%s", want, e)
			}
		}
	}
	// The stuck key is lost (and the keys after it in both workers' orders).
	if !strings.Contains(out.String(), "VIOLATION "+stuckKey.String()+" lost") {
		t.Errorf("the stuck key is not reported lost\n%s", out.String())
	}
}

// TestHungWorkerQuit: workers that hang where their watchdog does not see
// it are each sent SIGQUIT once the run's deadline is Config.Stall past (one
// timer per worker: every one of them is reported, none waited for without
// end), and the report has their goroutines.
func TestHungWorkerQuit(t *testing.T) {
	t.Setenv(hangEnv, "1")
	var out bytes.Buffer
	// The workers are sent SIGQUIT Settle + Stall after they start: time
	// for a loaded machine to start them (the Go runtime prints goroutines
	// on SIGQUIT only once its signal handlers are in place).
	s, err := harness.Run(harness.Config{Store: "sqlite", Mode: "atleastonce", Kills: 0, Keys: 3, Workers: 3, Seed: 1,
		Duration: time.Second, Settle: 5 * time.Second, Stall: 2 * time.Second,
		Dir: t.TempDir(), Lease: 100 * time.Millisecond, Out: &out})
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if len(s.Errors) != 3 {
		t.Fatalf("%d errors, want one per worker\n%s", len(s.Errors), out.String())
	}
	for i, e := range s.Errors {
		for _, want := range []string{
			"worker w" + string(rune('0'+i)) + ".0",
			"stuck: still running 2s after the run's deadline; sent SIGQUIT",
			"SIGQUIT: quit", // the runtime's dump
			"hangBeforeWork",
		} {
			if !strings.Contains(e, want) {
				t.Errorf("error without %q:\n%s", want, e)
			}
		}
	}
}

// TestUsage checks that bad flags and combinations are refused with status 2
// before anything starts.
func TestUsage(t *testing.T) {
	for _, args := range [][]string{
		{"-store", "statefile", "-mode", "tx"},
		{"-store", "statefile", "-mode", "outbox"},
		{"-store", "postgres"},
		{"-mode", "exactlyonce"},
		{"-keys", "0"},
		{"-workers", "0"},
		{"-lease", "0s"},
		{"extra"},
	} {
		var stdout, stderr bytes.Buffer
		if got := harness.Main(args, &stdout, &stderr); got != 2 {
			t.Errorf("%q: status %d, want 2; stdout:\n%s", args, got, stdout.String())
		}
		if !strings.Contains(stderr.String(), "usage") {
			t.Errorf("%q: no usage in stderr:\n%s", args, stderr.String())
		}
	}
	// A store of another module: the refusal says where it is.
	for store, module := range map[string]string{"postgres": "pgledger", "redis": "redisstore"} {
		var stdout, stderr bytes.Buffer
		if got := harness.Main([]string{"-store", store}, &stdout, &stderr); got != 2 || !strings.Contains(stderr.String(), "cd "+module) {
			t.Errorf("-store %s: status %d, stderr:\n%s", store, got, stderr.String())
		}
	}
}
