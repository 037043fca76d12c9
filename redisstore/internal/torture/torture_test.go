package main

import (
	"bytes"
	"os"
	"strings"
	"testing"

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
	harness.ShortRuns(t, "redis", addrEnv, "redis-server", []string{"atleastonce", "atmostonce", "twophase"})
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
