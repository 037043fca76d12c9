package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/hibiken/asynq"
	"github.com/idemgo/idem"
)

// asynq's server, tuned like River's client (river.go): it polls an empty
// queue every TaskCheckInterval (default 1 s; asynq has no notification of
// a new task), here River's poll interval, with as many workers.
const (
	asynqTaskCheckInterval = riverFetchPollInterval // 5 ms
	asynqConcurrency       = riverMaxWorkers
	asynqUniqueTTL         = time.Hour // how long a unique task's lock lasts if it is never processed
)

// asynqTaskType is asynq's task for one idem key; its payload is the key
// (benchArgs as JSON), so that Unique (by type, payload and queue) makes it
// unique per key.
const asynqTaskType = "idem_bench"

// asynqEnv is an asynq client and a started server working asynqTaskType
// tasks from a queue of its own, on the Redis server at addr, with their
// own connections.
type asynqEnv struct {
	client    *asynq.Client
	server    *asynq.Server
	inspector *asynq.Inspector
	queue     string
	handled   chan struct{} // one per task the handler ran
	processed int           // tasks enqueued so far: what the queue's processed total must reach
}

// asynqQuiet discards asynq's log.
type asynqQuiet struct{}

func (asynqQuiet) Debug(...any) {}
func (asynqQuiet) Info(...any)  {}
func (asynqQuiet) Warn(...any)  {}
func (asynqQuiet) Error(...any) {}
func (asynqQuiet) Fatal(...any) {}

// startAsynq starts a server of workers workers on a new queue; none of
// this is timed.
func startAsynq(addr string, n, workers int) (*asynqEnv, error) {
	opt := asynq.RedisClientOpt{Addr: addr}
	e := &asynqEnv{queue: randomName("idem_bench_"), handled: make(chan struct{}, n+1000)}
	e.server = asynq.NewServer(opt, asynq.Config{
		Concurrency:       workers,
		Queues:            map[string]int{e.queue: 1},
		TaskCheckInterval: asynqTaskCheckInterval,
		ShutdownTimeout:   10 * time.Second,
		Logger:            asynqQuiet{},
	})
	mux := asynq.NewServeMux()
	mux.HandleFunc(asynqTaskType, func(context.Context, *asynq.Task) error {
		e.handled <- struct{}{} // the work: nothing, like the idem side's fn
		return nil
	})
	if err := e.server.Start(mux); err != nil {
		return nil, fmt.Errorf("asynq server: %w", err)
	}
	e.client = asynq.NewClient(opt)
	e.inspector = asynq.NewInspector(opt)
	return e, nil
}

func (e *asynqEnv) stop() {
	e.server.Shutdown()
	_ = e.inspector.DeleteQueue(e.queue, true)
	e.inspector.Close()
	e.client.Close()
}

// enqueueAndProcess enqueues one unique task per key, one Enqueue each (as
// one trigger per key would), and returns when asynq's server has run them
// all and recorded each as processed (the queue's processed total, which
// asynq raises in the same script that removes a finished task and its
// unique lock).
func (e *asynqEnv) enqueueAndProcess(ctx context.Context, keys []idem.Key) error {
	for _, k := range keys {
		if err := e.enqueue(ctx, k); err != nil {
			return err
		}
	}
	return e.awaitProcessed(keys)
}

// enqueue enqueues k's unique task.
func (e *asynqEnv) enqueue(ctx context.Context, k idem.Key) error {
	payload, err := json.Marshal(benchArgs{Job: k.Job, Period: k.Period})
	if err != nil {
		return err
	}
	if _, err := e.client.EnqueueContext(ctx, asynq.NewTask(asynqTaskType, payload),
		asynq.Queue(e.queue), asynq.Unique(asynqUniqueTTL)); err != nil {
		if errors.Is(err, asynq.ErrDuplicateTask) {
			return fmt.Errorf("asynq: %s was a duplicate", k)
		}
		return fmt.Errorf("asynq: enqueue %s: %w", k, err)
	}
	return nil
}

// awaitProcessed returns when the handler has run for every one of keys,
// enqueued, and asynq has recorded the last of them as processed.
func (e *asynqEnv) awaitProcessed(keys []idem.Key) error {
	e.processed += len(keys)
	handled := time.NewTimer(time.Minute)
	defer handled.Stop()
	for i := range keys {
		select {
		case <-e.handled:
		case <-handled.C:
			return fmt.Errorf("asynq: %d of %d tasks handled within a minute", i, len(keys))
		}
	}
	// The handler has returned for every task; wait (polling, 1 ms apart)
	// until asynq has recorded the last of them as processed.
	recorded := time.NewTimer(time.Minute)
	defer recorded.Stop()
	for {
		info, err := e.inspector.GetQueueInfo(e.queue)
		if err != nil {
			return err
		}
		if info.ProcessedTotal >= e.processed {
			return nil
		}
		select {
		case <-time.After(time.Millisecond):
		case <-recorded.C:
			return fmt.Errorf("asynq: processed total %d, want %d, a minute after the handler ran", info.ProcessedTotal, e.processed)
		}
	}
}

// redisFreshRunVsAsynq: redisstore's Run of new keys against asynq on the
// same Redis server: one unique task per key, enqueued and processed.
func redisFreshRunVsAsynq(ctx context.Context, cfg config) (result, error) {
	e, why, err := openRedis(ctx, cfg)
	if err != nil || e == nil {
		return result{skipped: why}, err
	}
	defer e.close(ctx)
	q, err := startAsynq(e.client.Options().Addr, cfg.n, asynqConcurrency)
	if err != nil {
		return result{}, err
	}
	defer q.stop()
	res, err := alternate(ctx, cfg, ledgerFreshSide(e.store, cfg.n), side{ops: func(ctx context.Context, round int) (int, error) {
		keys := roundKeys("fresh", round, cfg.n)
		return len(keys), q.enqueueAndProcess(ctx, keys)
	}})
	res.note = asynqUnitNote
	return res, err
}

// redisConcurrentFreshRunVsAsynq: redis_fresh_run_vs_asynq at equal
// concurrency. idem: 16 goroutines run redisstore's Run (AtLeastOnce) of
// the round's new keys, each taking the next key. asynq: 16 goroutines
// enqueue one unique task per key, each taking the next key, and a server
// of 16 workers processes them; the round ends when asynq has recorded
// every task as processed. Both on the same server, each side with its
// own connections (go-redis's pool: 10 per CPU), the same keys a round.
func redisConcurrentFreshRunVsAsynq(ctx context.Context, cfg config) (result, error) {
	e, why, err := openRedis(ctx, cfg)
	if err != nil || e == nil {
		return result{skipped: why}, err
	}
	defer e.close(ctx)
	q, err := startAsynq(e.client.Options().Addr, cfg.n, concurrency)
	if err != nil {
		return result{}, err
	}
	defer q.stop()
	idemRun := func(ctx context.Context, k idem.Key) error { return e.store.Run(ctx, k, noop) }
	res, err := alternate(ctx, cfg, concurrentSide(cfg.n, idemRun), side{ops: func(ctx context.Context, round int) (int, error) {
		keys := roundKeys("fresh", round, cfg.n)
		if err := concurrently(ctx, keys, q.enqueue); err != nil {
			return 0, err
		}
		return len(keys), q.awaitProcessed(keys)
	}})
	res.note = asynqUnitNote
	return res, err
}

// asynqUnitNote says what one unit of each side of the asynq lines is.
const asynqUnitNote = "a unit: idem one fresh Run = claim + done mark (2 scripts, 2 AOF-fsynced writes, in turn); " +
	"asynq one task = enqueue + dequeue + done (3 scripts, each a write; dequeues and done marks share fsyncs with the enqueues)"
