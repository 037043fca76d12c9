package main

import (
	"bytes"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/idemgo/idem/internal/torture/harness"
)

// TestMain makes the test binary a worker when the parent re-executes it.
func TestMain(m *testing.M) {
	if harness.IsWorker() {
		os.Exit(harness.RunWorker())
	}
	os.Exit(m.Run())
}

// TestTorture runs a short kill -9 pass for every valid store × mode.
func TestTorture(t *testing.T) {
	combos := []struct{ store, mode string }{
		{"sqlite", "atleastonce"},
		{"sqlite", "atmostonce"},
		{"sqlite", "twophase"},
		{"sqlite", "tx"},
		{"statefile", "atleastonce"},
		{"statefile", "atmostonce"},
		{"statefile", "twophase"},
	}
	for _, c := range combos {
		t.Run(c.store+"/"+c.mode, func(t *testing.T) {
			var out bytes.Buffer
			seed := time.Now().UnixNano()
			s, err := harness.Run(harness.Config{
				Store: c.store, Mode: c.mode,
				Kills: 40, Keys: 300, Workers: 3,
				Seed: seed, Duration: 20 * time.Second, Settle: time.Minute,
				Dir: t.TempDir(), Lease: 100 * time.Millisecond,
				Out: &out,
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
	if !strings.HasPrefix(s.Line(), "torture: store=sqlite mode=atleastonce kills=0 keys=3 effects=0") {
		t.Fatalf("last line %q", s.Line())
	}
}

// TestUsage checks that bad flags and combinations are refused with status 2
// before anything starts.
func TestUsage(t *testing.T) {
	for _, args := range [][]string{
		{"-store", "statefile", "-mode", "tx"},
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
	var stdout, stderr bytes.Buffer
	if got := harness.Main([]string{"-store", "postgres"}, &stdout, &stderr); got != 2 || !strings.Contains(stderr.String(), "cd pgledger") {
		t.Errorf("-store postgres: status %d, stderr:\n%s", got, stderr.String())
	}
}
