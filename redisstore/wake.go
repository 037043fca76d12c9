package redisstore

import (
	"context"
	"fmt"
	"strconv"

	"github.com/idemgo/idem/idemstore"
	"github.com/redis/go-redis/v9"
)

// The wake marks of idemstore.Waker: a sorted set, wakes, of the jobs ever
// woken, each scored with the value of the counter (the field
// wake_counter of the store's meta hash) when it was last woken. Resolve's
// and Rerun's scripts write them in the same step as their change; a
// script runs alone, so the marks are numbered in the order the changes
// were made. The layout only gains a key and a field: an older redisstore
// neither writes nor reads them.

var _ idemstore.Waker = (*Store)(nil)

// Wake implements [idemstore.Waker].
func (s *Store) Wake(ctx context.Context, job string) error {
	if err := idemstore.ValidateJob(job); err != nil {
		return err
	}
	if err := wakeScript.Run(ctx, s.client, []string{s.metaKey(), s.wakesKey()}, job).Err(); err != nil {
		return fmt.Errorf("redisstore: store %q: wake %s: %w", s.name, job, err)
	}
	return nil
}

// Woken implements [idemstore.Waker]: one ZRANGE of the marks above after.
func (s *Store) Woken(ctx context.Context, after int64) ([]string, int64, error) {
	zs, err := s.client.ZRangeByScoreWithScores(ctx, s.wakesKey(), &redis.ZRangeBy{Min: "(" + strconv.FormatInt(after, 10), Max: "+inf"}).Result()
	if err != nil {
		return nil, after, fmt.Errorf("redisstore: store %q: read wake marks: %w", s.name, err)
	}
	jobs := make([]string, 0, len(zs))
	next := after
	for _, z := range zs {
		job, ok := z.Member.(string)
		if !ok {
			return nil, after, fmt.Errorf("redisstore: store %q: read wake marks: member %v is no string", s.name, z.Member)
		}
		jobs = append(jobs, job)
		next = max(next, int64(z.Score))
	}
	return jobs, next, nil
}
