package redisstore_test

import (
	"context"
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/idemgo/idem/internal/testwait"
	"github.com/idemgo/idem/redisstore"
	"github.com/redis/go-redis/v9"
)

// TestReplicaRefused: a replica is refused with ErrWeakDurability that
// says so, even with AllowWeakDurability. The replica is a redis-server of
// the test's own (startServer), set to replicate a primary that does not
// exist: its role is replica all the same.
func TestReplicaRefused(t *testing.T) {
	t.Parallel()
	testAddr(t) // skips (or fails in CI) without the test server, as the others
	c := startServer(t, "--replicaof", "127.0.0.1", "1")
	ctx := context.Background()
	for _, opts := range [][]redisstore.Option{nil, {redisstore.AllowWeakDurability()}} {
		_, err := redisstore.New(ctx, c, opts...)
		if !errors.Is(err, redisstore.ErrWeakDurability) || !strings.Contains(err.Error(), "replica") {
			t.Fatalf("New on a replica (%d options): %v; want ErrWeakDurability saying it is a replica", len(opts), err)
		}
	}
}

// startServer starts a redis-server of the test's own with extra arguments
// (after appendonly yes and appendfsync always), listening on a unix
// socket in a temporary directory and on no TCP port, and returns a client
// of it; both end with the test. Without redis-server on PATH the test
// skips (fails in CI).
func startServer(t *testing.T, args ...string) *redis.Client {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		if inCI() {
			t.Fatalf("redis-server not on PATH: %v", err)
		}
		t.Skipf("redis-server not on PATH: %v", err)
	}
	dir := t.TempDir()
	sock := filepath.Join(dir, "redis.sock")
	log := filepath.Join(dir, "server.log")
	cmd := exec.Command(bin, append([]string{"--port", "0", "--unixsocket", sock, "--unixsocketperm", "700", "--dir", dir,
		"--save", "", "--appendonly", "yes", "--appendfsync", "always", "--logfile", log}, args...)...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	c := redis.NewClient(&redis.Options{Network: "unix", Addr: sock})
	t.Cleanup(func() { _ = c.Close() })
	testwait.Until(t, func() bool { return c.Ping(context.Background()).Err() == nil }, "redis-server to answer on %s (its log: %s)", sock, log)
	return c
}
