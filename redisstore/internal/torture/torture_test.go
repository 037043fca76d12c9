package main

import (
	"bytes"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/idemgo/idem/internal/torture/harness"
)

// TestMain registers the redis backend, and makes the test binary a worker
// when a run re-executes it.
func TestMain(m *testing.M) {
	harness.Register(redisBackend())
	if harness.IsWorker() {
		os.Exit(harness.RunWorker())
	}
	os.Exit(m.Run())
}

// TestTortureRedis runs a short kill -9 pass of every mode against the
// Redis store.
func TestTortureRedis(t *testing.T) {
	if os.Getenv(addrEnv) == "" {
		if v := os.Getenv("CI"); v != "" && v != "false" && v != "0" {
			t.Fatalf("%s is not set, and CI must run the Redis tests: run scripts/test.sh (it starts redis-server with scripts/redis.sh)", addrEnv)
		}
		t.Skipf("no Redis: run scripts/test.sh (it starts a throwaway server), or set %s=host:port", addrEnv)
	}
	modes := []string{"atleastonce", "atmostonce", "twophase"}
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
			s, err := harness.Run(harness.Config{
				Store: "redis", Mode: mode,
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
			if !strings.HasPrefix(s.Line(), "torture: store=redis mode="+mode+" ") {
				t.Fatalf("last line %q", s.Line())
			}
			t.Log(s.Line())
		})
	}
}

// TestNoServer: without a server, -store redis is a usage error naming
// the flag.
func TestNoServer(t *testing.T) {
	t.Setenv(addrEnv, "")
	var stdout, stderr bytes.Buffer
	if got := harness.Main([]string{"-store", "redis", "-kills", "1"}, &stdout, &stderr); got != 2 || !strings.Contains(stderr.String(), "-redis-addr") {
		t.Fatalf("status %d, stderr:\n%s", got, stderr.String())
	}
}

// TestNoTx: the Redis store has no RunTx; -mode tx is a usage error.
func TestNoTx(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if got := harness.Main([]string{"-store", "redis", "-mode", "tx", "-kills", "1"}, &stdout, &stderr); got != 2 || !strings.Contains(stderr.String(), "-mode tx") {
		t.Fatalf("status %d, stderr:\n%s", got, stderr.String())
	}
}
