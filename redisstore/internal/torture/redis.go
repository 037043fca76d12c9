package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/internal/torture/harness"
	"github.com/idemgo/idem/redisstore"
	"github.com/redis/go-redis/v9"
)

// addrEnv names the server when -redis-addr does not: the variable the
// redisstore tests use (scripts/redis.sh starts a throwaway server and
// prints it).
const addrEnv = "IDEM_TEST_REDIS_ADDR"

// redisLoc is what every process of a run needs to reach its store: the
// parent's Prepare makes it, and the workers get it in their environment.
type redisLoc struct {
	Addr   string `json:"addr"`
	Prefix string `json:"prefix"`
}

func redisBackend() *harness.Backend {
	var addrFlag string
	return &harness.Backend{
		Name: "redis",
		Flags: func(fs *flag.FlagSet) {
			fs.StringVar(&addrFlag, "redis-addr", "", "-store redis: the server, host:port (default $"+addrEnv+"); each run keeps its keys under a new prefix there")
		},
		Prepare: func(ctx context.Context, dir string) (string, string, error) {
			addr := addrFlag
			if addr == "" {
				addr = os.Getenv(addrEnv)
			}
			if addr == "" {
				return "", "", harness.UsageError(fmt.Errorf("-store redis needs a server: -redis-addr or $%s (scripts/redis.sh starts a throwaway one)", addrEnv))
			}
			var b [4]byte
			_, _ = rand.Read(b[:])
			loc := redisLoc{Addr: addr, Prefix: "idem-torture-" + time.Now().UTC().Format("20060102t150405") + "-" + hex.EncodeToString(b[:])}
			// Open the store now: a server that does not fsync every write
			// is refused before any worker starts.
			h, err := openRedis(ctx, loc)
			if err != nil {
				return "", "", err
			}
			_ = h.Close()
			// For a kept directory: which prefix holds its store.
			if err := os.WriteFile(filepath.Join(dir, "redis-prefix.txt"), []byte(loc.Prefix+"\n"), 0o644); err != nil {
				return "", "", err
			}
			j, err := json.Marshal(loc)
			if err != nil {
				return "", "", err
			}
			return string(j), fmt.Sprintf("redis server %s, prefix %s (a client per worker process)", loc.Addr, loc.Prefix), nil
		},
		Open: func(ctx context.Context, dir, locJSON string) (*harness.Handle, error) {
			var loc redisLoc
			if err := json.Unmarshal([]byte(locJSON), &loc); err != nil || loc.Prefix == "" {
				return nil, fmt.Errorf("bad redis locator %q: %v", locJSON, err)
			}
			return openRedis(ctx, loc)
		},
		Cleanup: func(ctx context.Context, locJSON string) error {
			var loc redisLoc
			if err := json.Unmarshal([]byte(locJSON), &loc); err != nil {
				return err
			}
			c := redis.NewClient(&redis.Options{Addr: loc.Addr})
			defer c.Close()
			keys, err := c.Keys(ctx, "{"+loc.Prefix+"}:*").Result()
			if err != nil || len(keys) == 0 {
				return err
			}
			return c.Del(ctx, keys...).Err()
		},
	}
}

// clientTimeout is a worker's read and write deadline: long, because a
// worker on a loaded machine can go seconds without CPU, and go-redis's
// default 3 s deadline would then fail a command the server had answered
// (a killed server still fails at once: its connections are reset).
const clientTimeout = time.Minute

// openWait is how long a worker waits for the server to answer when it
// opens its store: a run may kill and restart redis-server (while it
// reloads its append-only file it answers LOADING).
const openWait = 30 * time.Second

// openRedis opens a worker's store on a client of its own, waiting
// openWait at most for a server that is down or loading.
func openRedis(ctx context.Context, loc redisLoc) (*harness.Handle, error) {
	deadline := time.Now().Add(openWait)
	for {
		c := redis.NewClient(&redis.Options{Addr: loc.Addr, ReadTimeout: clientTimeout, WriteTimeout: clientTimeout})
		s, err := redisstore.New(ctx, c, redisstore.WithPrefix(loc.Prefix))
		if err == nil {
			return &harness.Handle{Store: s, Close: c.Close}, nil
		}
		_ = c.Close()
		if errors.Is(err, redisstore.ErrWeakDurability) || errors.Is(err, idem.ErrNewerSchema) || time.Now().After(deadline) {
			return nil, err
		}
		time.Sleep(100 * time.Millisecond)
	}
}
