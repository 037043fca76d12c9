package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/pgledger"
	"github.com/spf13/cobra"
)

// EnvPostgres is the environment variable that names the Postgres ledger's
// DSN when --postgres is not given.
const EnvPostgres = "IDEM_POSTGRES"

// EnvNow fixes idem's clock to an RFC 3339 instant. It is for tests only:
// it lets a test move "now" forward by days without waiting. Leases,
// backoffs, due periods and prune cut-offs all use it; the command itself
// still runs in real time.
const EnvNow = "IDEM_NOW"

// fixedClock is an idem.Clock whose Now is fixed ($IDEM_NOW); waits are real.
type fixedClock struct{ now time.Time }

func (c fixedClock) Now() time.Time                         { return c.now }
func (c fixedClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

type systemClock struct{}

func (systemClock) Now() time.Time                         { return time.Now() }
func (systemClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// clock returns the clock idem uses: the system clock, or the fixed one of
// $IDEM_NOW (tests only).
func clock() (idem.Clock, error) {
	v := os.Getenv(EnvNow)
	if v == "" {
		return systemClock{}, nil
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		return nil, usageError(fmt.Errorf("$%s=%q: want an RFC 3339 time like 2026-10-28T02:00:00Z: %w", EnvNow, v, err))
	}
	return fixedClock{now: t}, nil
}

// ledger is an open store and how to close it.
type ledger struct {
	store idem.CatchUpStore
	desc  string // for messages: the file's path or "postgres"
	close func()
}

// target is where the ledger is: a SQLite file or a Postgres DSN.
type target struct {
	path string
	dsn  string
}

// ledgerTarget resolves --ledger, --postgres, $IDEM_POSTGRES, $IDEM_LEDGER
// and the default path, in that order.
func ledgerTarget(cmd *cobra.Command) (target, error) {
	path, _ := cmd.Flags().GetString("ledger")
	dsn, _ := cmd.Flags().GetString("postgres")
	switch {
	case path != "":
		return target{path: path}, nil
	case dsn != "":
		return target{dsn: dsn}, nil
	}
	if dsn := os.Getenv(EnvPostgres); dsn != "" {
		if os.Getenv(idem.EnvLedger) != "" {
			return target{}, usageError(fmt.Errorf("both $%s and $%s are set: unset one, or pass --ledger or --postgres", EnvPostgres, idem.EnvLedger))
		}
		return target{dsn: dsn}, nil
	}
	p, err := idem.DefaultLedgerPath()
	if err != nil {
		return target{}, usageError(err)
	}
	return target{path: p}, nil
}

// openLedger opens the ledger the flags name. create allows creating a new
// SQLite file (and its directory); without it a missing file is an error,
// so that a mistyped --ledger does not silently show an empty ledger.
func openLedger(ctx context.Context, cmd *cobra.Command, clk idem.Clock, create bool) (*ledger, error) {
	t, err := ledgerTarget(cmd)
	if err != nil {
		return nil, err
	}
	if t.dsn != "" {
		schema, _ := cmd.Flags().GetString("postgres-schema")
		pl, err := pgledger.Open(ctx, t.dsn, pgledger.WithSchema(schema), pgledger.WithRunOptions(idem.WithClock(clk)))
		if err != nil {
			return nil, usageError(fmt.Errorf("postgres ledger: %w", err))
		}
		return &ledger{store: pl, desc: "postgres ledger (schema " + pl.Schema() + ")", close: pl.Close}, nil
	}
	if create {
		if err := os.MkdirAll(filepath.Dir(t.path), 0o755); err != nil {
			return nil, usageError(fmt.Errorf("ledger %s: %w", t.path, err))
		}
	} else if _, err := os.Stat(t.path); errors.Is(err, os.ErrNotExist) {
		return nil, usageError(fmt.Errorf("no ledger at %s (nothing has run with it yet; pass --ledger, or set $%s)", t.path, idem.EnvLedger))
	}
	l, err := idem.OpenLedger(t.path, idem.WithClock(clk))
	if err != nil {
		return nil, usageError(err)
	}
	return &ledger{store: l, desc: "ledger " + l.Path(), close: func() { l.Close() }}, nil
}

// storeTimeout bounds one ledger operation that must complete although the
// run is stopping (see detached).
const storeTimeout = time.Minute

// detached wraps the store of a run so that recording an attempt's end
// survives a SIGTERM: when idem is asked to stop, it cancels the run's
// context (so that no backoff wait holds it up), but the failure of the
// interrupted command must still be written to the ledger. Every method
// but Claim therefore runs detached from the run's cancellation (bounded by
// storeTimeout); Claim keeps it, so that no new period is started once idem
// is stopping.
type detached struct{ idem.CatchUpStore }

func detach(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), storeTimeout)
}

func (d detached) Claim(ctx context.Context, req idem.ClaimRequest) (idem.Claim, error) {
	if err := ctx.Err(); err != nil {
		return idem.Claim{}, fmt.Errorf("not starting %s: %w", req.Key, context.Cause(ctx))
	}
	ctx, cancel := detach(ctx)
	defer cancel()
	return d.CatchUpStore.Claim(ctx, req)
}

func (d detached) Renew(ctx context.Context, key idem.Key, attempt int64, now time.Time, lease time.Duration) error {
	ctx, cancel := detach(ctx)
	defer cancel()
	return d.CatchUpStore.Renew(ctx, key, attempt, now, lease)
}

func (d detached) Finish(ctx context.Context, key idem.Key, attempt int64, end idem.End) error {
	ctx, cancel := detach(ctx)
	defer cancel()
	return d.CatchUpStore.Finish(ctx, key, attempt, end)
}

func (d detached) Resolve(ctx context.Context, key idem.Key, to idem.Resolution) error {
	ctx, cancel := detach(ctx)
	defer cancel()
	return d.CatchUpStore.Resolve(ctx, key, to)
}

func (d detached) Lookup(ctx context.Context, key idem.Key) (idem.Record, bool, error) {
	ctx, cancel := detach(ctx)
	defer cancel()
	return d.CatchUpStore.Lookup(ctx, key)
}

func (d detached) Job(ctx context.Context, job string) (idem.JobState, error) {
	ctx, cancel := detach(ctx)
	defer cancel()
	return d.CatchUpStore.Job(ctx, job)
}

func (d detached) Advance(ctx context.Context, job, period string) error {
	ctx, cancel := detach(ctx)
	defer cancel()
	return d.CatchUpStore.Advance(ctx, job, period)
}

func (d detached) Start(ctx context.Context, job, before string) (idem.JobState, error) {
	ctx, cancel := detach(ctx)
	defer cancel()
	return d.CatchUpStore.Start(ctx, job, before)
}
