package harness

import (
	"bytes"
	"os"
	"strings"
	"testing"
	"time"
)

// ShortRuns is the test a store's torture command runs in its module: a
// short kill -9 pass (10 kills, 20 keys, 3 workers) of each mode against the
// registered backend store, each a subtest that fails on any violation,
// lost key or worker error. It skips when env (the variable that names the
// server) is unset, saying how to get one, except under CI, which must run
// it: there it fails.
func ShortRuns(t *testing.T, store, env, server string, modes []string) {
	t.Helper()
	if os.Getenv(env) == "" {
		if v := os.Getenv("CI"); v != "" && v != "false" && v != "0" {
			t.Fatalf("%s is not set, and CI must run the %s tests: run scripts/test.sh (it starts %s)", env, store, server)
		}
		t.Skipf("no %s: run scripts/test.sh (it starts a throwaway server), or set %s", server, env)
	}
	for i, mode := range modes {
		t.Run(mode, func(t *testing.T) {
			var out bytes.Buffer
			seed := time.Now().UnixNano()
			const duration = 10 * time.Second // 10 kills take a few
			// A minute to settle, or less so that the runs left end before
			// the test's deadline (go test -timeout).
			settle := time.Minute
			if dl, ok := t.Deadline(); ok {
				settle = max(10*time.Second, min(settle, (time.Until(dl)-30*time.Second)/time.Duration(len(modes)-i)-duration))
			}
			s, err := Run(Config{
				Store: store, Mode: mode,
				Kills: 10, Keys: 20, Workers: 3,
				Seed: seed, Duration: duration, Settle: settle,
				Lease: 100 * time.Millisecond,
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
			if !strings.HasPrefix(s.Line(), "torture: store="+store+" mode="+mode+" ") {
				t.Fatalf("last line %q", s.Line())
			}
			t.Log(s.Line())
		})
	}
}
