package redisstore_test

import (
	"context"
	"strings"
	"testing"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemtest"
	"github.com/idemgo/idem/redisstore"
	"github.com/redis/go-redis/v9"
)

// TestLimits runs idemtest's conformance suite of idemstore.LimitStore.
func TestLimits(t *testing.T) {
	t.Parallel()
	c := newClient(t)
	idemtest.TestLimits(t, func(t *testing.T) idem.Store { return openStore(t, c) })
}

// TestSharedLimits runs package limit's limits in three processes on one
// store: New makes a fresh prefix (its keys deleted when the test ends)
// and returns "prefix|address".
func TestSharedLimits(t *testing.T) {
	idemtest.TestSharedLimits(t, idemtest.LimitHarness{
		New: func(t *testing.T) string {
			if idemtest.IsChild(t) {
				return "" // the child is told where by its parent: create nothing here
			}
			s := openStore(t, newClient(t))
			return s.Prefix() + "|" + testAddr(t)
		},
		Open: func(t *testing.T, where string) idem.Store {
			prefix, addr, ok := strings.Cut(where, "|")
			if !ok {
				t.Fatalf("limit harness: %q is not prefix|address", where)
			}
			c := redis.NewClient(&redis.Options{Addr: addr, ReadTimeout: testClientTimeout, WriteTimeout: testClientTimeout})
			t.Cleanup(func() { _ = c.Close() })
			s, err := redisstore.New(context.Background(), c, redisstore.WithPrefix(prefix))
			if err != nil {
				t.Fatal(err)
			}
			return s
		},
	})
}
