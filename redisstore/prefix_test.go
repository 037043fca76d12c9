package redisstore_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/idemgo/idem"
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
		if !errors.Is(err, idem.ErrInvalidOption) || !strings.Contains(err.Error(), "redisstore.WithPrefix(") {
			t.Errorf("WithPrefix(%.20q): %v; want an error matching idem.ErrInvalidOption naming redisstore.WithPrefix", p, err)
		}
	}
	if _, err := redisstore.New(context.Background(), c, nil); !errors.Is(err, idem.ErrInvalidOption) || !strings.Contains(err.Error(), "option 1 of 1 is nil") {
		t.Errorf("nil option: %v; want an error matching idem.ErrInvalidOption naming its place", err)
	}
}
