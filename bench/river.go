package main

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"time"

	"github.com/idemgo/idem"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver"
	"github.com/riverqueue/river/rivermigrate"
)

// River's client, tuned for a short wait between an insert and its fetch:
// FetchCooldown at River's minimum and a short FetchPollInterval (the
// defaults are 100 ms and 1 s). On Postgres an insert also wakes the
// producer through LISTEN/NOTIFY; riversqlite emulates NOTIFY with a table
// it polls every 50 ms, so there the poll interval is what picks a new job
// up. MaxWorkers is generous: the jobs do nothing.
const (
	riverFetchCooldown     = river.FetchCooldownMin // 1 ms
	riverFetchPollInterval = 5 * time.Millisecond
	riverMaxWorkers        = 100
)

// benchArgs is River's job for one idem key: unique by its arguments, so a
// second insert of the same key is skipped as a duplicate (by default
// UniqueOpts also covers completed jobs, as idem's done mark does).
type benchArgs struct {
	Job    string `json:"job"`
	Period string `json:"period"`
}

func (benchArgs) Kind() string { return "idem_bench" }

func (benchArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{UniqueOpts: river.UniqueOpts{ByArgs: true}}
}

// benchWorker does nothing, like the idem side's fn.
type benchWorker struct {
	river.WorkerDefaults[benchArgs]
}

func (*benchWorker) Work(context.Context, *river.Job[benchArgs]) error { return nil }

// riverEnv is a started River client that works benchArgs jobs, and a
// subscription to their completions.
type riverEnv[TTx any] struct {
	client *river.Client[TTx]
	done   <-chan *river.Event
	unsub  func()
	db     *sql.DB // River's database, when it is SQLite (openRiverSQLite)
}

// startRiver migrates River's tables (in schema, "" for the default) and
// starts a client; none of this is timed.
func startRiver[TTx any](ctx context.Context, driver riverdriver.Driver[TTx], schema string, n int, extra ...func(*river.Workers)) (*riverEnv[TTx], error) {
	quiet := slog.New(slog.DiscardHandler)
	m, err := rivermigrate.New(driver, &rivermigrate.Config{Logger: quiet, Schema: schema})
	if err != nil {
		return nil, err
	}
	if _, err := m.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return nil, fmt.Errorf("river migrate: %w", err)
	}
	workers := river.NewWorkers()
	river.AddWorker(workers, &benchWorker{})
	for _, add := range extra {
		add(workers)
	}
	client, err := river.NewClient(driver, &river.Config{
		Logger:            quiet,
		Schema:            schema,
		FetchCooldown:     riverFetchCooldown,
		FetchPollInterval: riverFetchPollInterval,
		Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: riverMaxWorkers}},
		Workers:           workers,
	})
	if err != nil {
		return nil, err
	}
	done, unsub := client.SubscribeConfig(&river.SubscribeConfig{
		Kinds:    []river.EventKind{river.EventKindJobCompleted},
		ChanSize: n + 1000,
	})
	if err := client.Start(ctx); err != nil {
		unsub()
		return nil, err
	}
	return &riverEnv[TTx]{client: client, done: done, unsub: unsub}, nil
}

func (e *riverEnv[TTx]) stop(ctx context.Context) {
	e.unsub()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_ = e.client.Stop(ctx)
}

// insertAndWork inserts one unique job per key, one Insert each (as one
// trigger per key would), and returns when River has worked them all and
// committed their completion.
func (e *riverEnv[TTx]) insertAndWork(ctx context.Context, keys []idem.Key) error {
	for _, k := range keys {
		res, err := e.client.Insert(ctx, benchArgs{Job: k.Job, Period: k.Period}, nil)
		if err != nil {
			return err
		}
		if res.UniqueSkippedAsDuplicate {
			return fmt.Errorf("river: %s was a duplicate", k)
		}
	}
	return e.awaitCompleted(ctx, len(keys))
}

// insertDuplicates inserts keys whose jobs exist (and are completed) again;
// River must skip every one.
func (e *riverEnv[TTx]) insertDuplicates(ctx context.Context, keys []idem.Key) error {
	for _, k := range keys {
		res, err := e.client.Insert(ctx, benchArgs{Job: k.Job, Period: k.Period}, nil)
		if err != nil {
			return err
		}
		if !res.UniqueSkippedAsDuplicate {
			return fmt.Errorf("river: %s was inserted again", k)
		}
	}
	return nil
}
