package redisstore_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"testing"
	"time"

	"github.com/idemgo/idem/redisstore"
	"github.com/redis/go-redis/v9"
)

// The tests run against a real redis-server named by this variable;
// scripts/test.sh starts a throwaway one (scripts/redis.sh) and sets it.
const addrEnv = "IDEM_TEST_REDIS_ADDR"

// testAddr returns the test server's address. Without one the test is
// skipped, except in CI, where the Redis tests must run.
func testAddr(t testing.TB) string {
	t.Helper()
	addr := os.Getenv(addrEnv)
	if addr == "" {
		if inCI() {
			t.Fatalf("%s is not set, and CI must run the Redis tests: run scripts/test.sh (it starts redis-server with scripts/redis.sh)", addrEnv)
		}
		t.Skipf("no Redis: run scripts/test.sh (it starts a throwaway server), or set %s=host:port", addrEnv)
	}
	return addr
}

func inCI() bool {
	v := os.Getenv("CI")
	return v != "" && v != "false" && v != "0"
}

// newClient returns a client of the test server, closed when t ends. Its
// read and write deadlines are long: on a loaded machine (2 cores, two
// test steps and a browser beside this one) the test process can go
// seconds without CPU, and go-redis's default 3 s deadline would then fail
// a command the server had answered — a reply lost, which the fault tests
// inject on purpose and the model test does not expect.
func newClient(t testing.TB) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: testAddr(t), ReadTimeout: testClientTimeout, WriteTimeout: testClientTimeout})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// testClientTimeout is the test clients' read and write deadline.
const testClientTimeout = time.Minute

// uniquePrefix returns a prefix no other test uses.
func uniquePrefix() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "idemtest-" + hex.EncodeToString(b[:])
}

// deleteLater deletes every key of the store with prefix when t ends.
func deleteLater(t testing.TB, c *redis.Client, prefix string) {
	t.Cleanup(func() {
		ctx := context.Background()
		keys, err := c.Keys(ctx, "{"+prefix+"}:*").Result()
		if err == nil && len(keys) > 0 {
			err = c.Del(ctx, keys...).Err()
		}
		if err != nil {
			t.Errorf("delete the keys of %s: %v", prefix, err)
		}
	})
}

// openStore attaches a store with a fresh prefix to c; its keys are
// deleted when t ends.
func openStore(t testing.TB, c *redis.Client, opts ...redisstore.Option) *redisstore.Store {
	t.Helper()
	prefix := uniquePrefix()
	deleteLater(t, c, prefix)
	s, err := redisstore.New(context.Background(), c, append([]redisstore.Option{redisstore.WithPrefix(prefix)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// shiftScript moves every time the records of a store keep back by
// ARGV[2] microseconds (forward when negative), in one step.
var shiftScript = redis.NewScript(`
local d = tonumber(ARGV[2])
for _, k in ipairs(redis.call('KEYS', ARGV[1])) do
	for _, f in ipairs({'lease_until', 'not_before', 'updated', 'created'}) do
		local v = redis.call('HGET', k, f)
		if v and v ~= '' then redis.call('HSET', k, f, string.format('%.0f', tonumber(v) - d)) end
	end
end
return 1
`)

// shiftTimes makes d pass for s: the server's clock cannot be faked, so
// every time s stored moves back by d.
func shiftTimes(s *redisstore.Store, d time.Duration) error {
	return shiftScript.Run(context.Background(), s.Client(), nil, "{"+s.Prefix()+"}:run:*", int64(d/time.Microsecond)).Err()
}
