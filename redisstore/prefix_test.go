package redisstore_test

import (
	"context"
	"strings"
	"testing"

	"github.com/idemgo/idem/redisstore"
	"github.com/redis/go-redis/v9"
)

// TestInvalidPrefix: a prefix that would break the key layout (empty,
// braces that end the hash tag early, control characters, too long) is
// refused by New, naming it, before the server is asked anything.
func TestInvalidPrefix(t *testing.T) {
	t.Parallel()
	// Nothing listens on port 1: a store that got past the prefix check
	// would fail with a connection error instead.
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	for _, p := range []string{"", "a{b", "a}b", "line\nbreak", strings.Repeat("p", 201)} {
		_, err := redisstore.New(context.Background(), c, redisstore.WithPrefix(p))
		if err == nil || !strings.Contains(err.Error(), "invalid prefix") {
			t.Errorf("WithPrefix(%.20q): %v; want an invalid prefix error", p, err)
		}
	}
}
