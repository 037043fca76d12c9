package main

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/redisstore"
	"github.com/redis/go-redis/v9"
)

// newRedisProvider finds a Redis server for the redis_ comparisons: the
// -redis-addr flag or $IDEM_TEST_REDIS_ADDR (host:port), else a throwaway
// server started with the repository's scripts/redis.sh (appendonly yes,
// appendfsync always: what redisstore requires) and stopped at the end.
func newRedisProvider(addr string) *serverProvider {
	return &serverProvider{given: addr, what: "Redis", flag: "-redis-addr", env: "IDEM_TEST_REDIS_ADDR", script: "redis.sh"}
}

// redisEnv is a client of the server, and idem's store on it under a
// prefix of its own; close deletes every key under the prefixes it handed
// out.
type redisEnv struct {
	client   *redis.Client
	store    *redisstore.Store
	prefixes []string
}

func openRedis(ctx context.Context, cfg config) (*redisEnv, string, error) {
	if cfg.redis == nil {
		return nil, "no Redis: IDEM_TEST_REDIS_ADDR is not set", nil
	}
	addr, why := cfg.redis.get()
	if addr == "" {
		return nil, why, nil
	}
	e := &redisEnv{client: redis.NewClient(&redis.Options{Addr: addr})}
	prefix := e.prefix("idem_bench_")
	s, err := redisstore.New(ctx, e.client, redisstore.WithPrefix(prefix))
	if err != nil {
		e.close(ctx)
		return nil, "", err
	}
	e.store = s
	return e, "", nil
}

// prefix returns a new random key prefix, deleted by close.
func (e *redisEnv) prefix(base string) string {
	p := randomName(base)
	e.prefixes = append(e.prefixes, p)
	return p
}

func (e *redisEnv) close(ctx context.Context) {
	for _, p := range e.prefixes {
		iter := e.client.Scan(ctx, 0, "{"+p+"}:*", 1000).Iterator()
		for iter.Next(ctx) {
			e.client.Del(ctx, iter.Val())
		}
	}
	if e.store != nil {
		e.store.Close()
	}
	e.client.Close()
}

// redisFloor is the hand-written floor on Redis: records with the layout
// of redisstore's (see its doc: a hash per key, the job's periods and the
// jobs in sorted sets) under a prefix of its own, written by two small Lua
// scripts, each atomic on the server and, with appendfsync always, fsynced
// before the server replies, as idem's are.
type redisFloor struct {
	client *redis.Client
	prefix string // {p}
}

func (f *redisFloor) runKey(k idem.Key) string {
	return f.prefix + ":run:" + strconv.Itoa(len(k.Job)) + ":" + k.Job + ":" + k.Period
}

// floorClaimScript is the floor's claim: the writes of redisstore's claim
// of a new key (attempt 1 by HINCRBY, the record's fields, the period and
// the job indexed for Prune and List), after the reads that decide it (no
// record, the job's horizon before the period).
//
// KEYS: record, job, periods, jobs. ARGV: owner, lease µs, job, period.
// Returns the attempt, or 0 if the key is taken.
var floorClaimScript = redis.NewScript(`
local function lt(a, b)
	local n = math.min(#a, #b)
	for i = 1, n do
		local x, y = string.byte(a, i), string.byte(b, i)
		if x ~= y then return x < y end
	end
	return #a < #b
end
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
local h = redis.call('HGET', KEYS[2], 'horizon')
if h and h ~= '' and not lt(h, ARGV[4]) then return 0 end
local t = redis.call('TIME')
local now = string.format('%.0f', tonumber(t[1]) * 1000000 + tonumber(t[2]))
local lease = string.format('%.0f', tonumber(now) + tonumber(ARGV[2]))
local a = redis.call('HINCRBY', KEYS[1], 'attempt', 1)
redis.call('HSET', KEYS[1], 'status', 'running', 'failures', 0, 'owner', ARGV[1],
	'lease_until', lease, 'last_error', '', 'created', now, 'updated', now)
redis.call('ZADD', KEYS[3], 0, ARGV[4])
redis.call('ZADD', KEYS[4], 0, ARGV[3])
return a
`)

// floorDoneScript is the floor's done mark, fenced by the attempt: the
// writes of redisstore's finish of a done attempt.
//
// KEYS: record. ARGV: attempt. Returns 1, or 0 if the attempt no longer
// holds the key.
var floorDoneScript = redis.NewScript(`
local r = redis.call('HMGET', KEYS[1], 'status', 'attempt')
if r[1] ~= 'running' or r[2] ~= ARGV[1] then return 0 end
local t = redis.call('TIME')
redis.call('HSET', KEYS[1], 'status', 'done', 'failures', 0, 'last_error', '',
	'updated', string.format('%.0f', tonumber(t[1]) * 1000000 + tonumber(t[2])))
redis.call('HDEL', KEYS[1], 'lease_until', 'not_before')
return 1
`)

// run is the floor's Run of a new key: claim, fn, done mark.
func (f *redisFloor) run(ctx context.Context, k idem.Key, fn func(context.Context) error) error {
	rec := f.runKey(k)
	a, err := floorClaimScript.Run(ctx, f.client,
		[]string{rec, f.prefix + ":job:" + k.Job, f.prefix + ":periods:" + k.Job, f.prefix + ":jobs"},
		floorOwner, int64(time.Minute/time.Microsecond), k.Job, k.Period).Int64()
	if err != nil {
		return err
	}
	if a == 0 {
		return fmt.Errorf("floor: %s is taken", k)
	}
	if err := fn(ctx); err != nil {
		return err
	}
	n, err := floorDoneScript.Run(ctx, f.client, []string{rec}, a).Int64()
	if err != nil {
		return err
	}
	if n != 1 {
		return fmt.Errorf("floor: %s: attempt %d lost the key", k, a)
	}
	return nil
}

// redisFreshRunVsFloor: redisstore's Run (AtLeastOnce) of new keys against
// the same claim and done mark as two hand-written Lua scripts (one round
// trip and one fsync each, as idem's).
func redisFreshRunVsFloor(ctx context.Context, cfg config) (result, error) {
	e, why, err := openRedis(ctx, cfg)
	if err != nil || e == nil {
		return result{skipped: why}, err
	}
	defer e.close(ctx)
	f := &redisFloor{client: e.client, prefix: "{" + e.prefix("floor_bench_") + "}"}
	floorSide := side{ops: func(ctx context.Context, round int) (int, error) {
		keys := roundKeys("fresh", round, cfg.n)
		for _, k := range keys {
			if err := f.run(ctx, k, noop); err != nil {
				return 0, err
			}
		}
		return len(keys), nil
	}}
	return alternate(ctx, cfg, ledgerFreshSide(e.store, cfg.n), floorSide)
}

// redisDuplicateVsFloor: redisstore's Run of keys already done against
// one HGET of the record's status (it must say done).
func redisDuplicateVsFloor(ctx context.Context, cfg config) (result, error) {
	e, why, err := openRedis(ctx, cfg)
	if err != nil || e == nil {
		return result{skipped: why}, err
	}
	defer e.close(ctx)
	keys := roundKeys("dup", 0, cfg.n)
	idemSide, err := ledgerDuplicateSide(ctx, e.store, keys)
	if err != nil {
		return result{}, err
	}
	f := &redisFloor{client: e.client, prefix: "{" + e.prefix("floor_bench_") + "}"}
	for _, k := range keys { // setup: the keys, done
		if err := f.run(ctx, k, noop); err != nil {
			return result{}, err
		}
	}
	floorSide := side{ops: func(ctx context.Context, round int) (int, error) {
		for range dupPasses {
			for _, k := range keys {
				status, err := f.client.HGet(ctx, f.runKey(k), "status").Result()
				if err != nil {
					return 0, err
				}
				if status != "done" {
					return 0, fmt.Errorf("%s is %s", k, status)
				}
			}
		}
		return dupPasses * len(keys), nil
	}}
	return alternate(ctx, cfg, idemSide, floorSide)
}
