package pgledger_test

import (
	"context"
	"os"
	"testing"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemtest"
	"github.com/idemgo/idem/internal/schedtest"
	"github.com/idemgo/idem/pgledger"
	"github.com/jackc/pgx/v5/pgxpool"
)

// openSchema is a schedtest.Opener of the ledger in schema, through a pool
// of its own (a replica's).
func openSchema(ctx context.Context, schema string) (idem.Store, func(), error) {
	pool, err := pgxpool.New(ctx, os.Getenv(dsnEnv))
	if err != nil {
		return nil, nil, err
	}
	l, err := pgledger.New(ctx, pool, pgledger.WithSchema(schema))
	if err != nil {
		pool.Close()
		return nil, nil, err
	}
	return l, pool.Close, nil
}

// newSchema creates a ledger in a fresh schema, dropped when t ends, and
// returns the schema's name (in the parent only: a child gets it in its
// argument).
func newSchema(t *testing.T) string {
	if idemtest.IsChild(t) {
		return ""
	}
	pool := newPool(t)
	return openLedger(t, pool).Schema()
}

// TestSchedulerReplicas: three Schedulers in goroutines, each on a pool of
// its own, on one Postgres ledger run each period of two jobs exactly once.
func TestSchedulerReplicas(t *testing.T) {
	testDSN(t)
	schedtest.Goroutines(t, newSchema(t), openSchema)
}

// TestSchedulerReplicaProcesses: three replicas in processes of their own
// on one Postgres ledger run each period once; the one SIGKILLed in the
// middle of a period leaves it to another, which finishes it.
func TestSchedulerReplicaProcesses(t *testing.T) {
	testDSN(t)
	schedtest.Processes(t, newSchema(t), openSchema)
}
