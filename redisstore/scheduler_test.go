package redisstore_test

import (
	"context"
	"os"
	"testing"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemtest"
	"github.com/idemgo/idem/internal/schedtest"
	"github.com/idemgo/idem/redisstore"
	"github.com/redis/go-redis/v9"
)

// openPrefix is a schedtest.Opener of the store under prefix, through a
// client of its own (a replica's).
func openPrefix(ctx context.Context, prefix string) (idem.Store, func(), error) {
	c := redis.NewClient(&redis.Options{Addr: os.Getenv(addrEnv), ReadTimeout: testClientTimeout, WriteTimeout: testClientTimeout})
	s, err := redisstore.New(ctx, c, redisstore.WithPrefix(prefix))
	if err != nil {
		c.Close()
		return nil, nil, err
	}
	return s, func() { c.Close() }, nil
}

// newPrefix makes a store under a prefix of its own, deleted when t ends,
// and returns the prefix (in the parent only: a child gets it in its
// argument).
func newPrefix(t *testing.T) string {
	if idemtest.IsChild(t) {
		return ""
	}
	return openStore(t, newClient(t)).Prefix()
}

// TestSchedulerWakeOnReset: three replicas in processes of their own on
// one Redis store with a daily job whose period is parked; a reset from
// another process is run by one of them within seconds (the wake mark,
// idem.SchedulerWakePoll), not at the next day's due time, and exactly
// once.
func TestSchedulerWakeOnReset(t *testing.T) {
	testAddr(t)
	schedtest.WakeProcesses(t, newPrefix(t), openPrefix)
}
