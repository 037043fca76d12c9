package main

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// pgTracer counts, with -count-sql, the statements a role's Postgres
// connections run and the round trips they take: one per Exec, Query or
// QueryRow (BEGIN and COMMIT are each one), one per batch whatever it
// holds. pgx prepares a statement the first time a connection runs it (one
// more round trip, not counted): the warm-up round does that.
type pgTracer struct{ c *sqlCount }

func (t pgTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	t.c.trips.Add(1)
	t.c.count(data.SQL)
	return ctx
}

func (pgTracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (t pgTracer) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	t.c.trips.Add(1)
	return ctx
}

func (t pgTracer) TraceBatchQuery(_ context.Context, _ *pgx.Conn, data pgx.TraceBatchQueryData) {
	t.c.count(data.SQL)
}

func (pgTracer) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

// pgPool opens a pool on dsn for role ("idem", "floor", "river") with at
// most maxConns connections (0: pgxpool's default); with -count-sql its
// statements and round trips are counted. afterConnect, if set, runs on
// every new connection.
func pgPool(ctx context.Context, dsn, role string, maxConns int32, afterConnect func(context.Context, *pgx.Conn) error) (*pgxpool.Pool, error) {
	pc, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, err
	}
	if maxConns > 0 {
		pc.MaxConns = maxConns
	}
	if countSQL {
		pc.ConnConfig.Tracer = pgTracer{countFor(role)}
	}
	pc.AfterConnect = afterConnect
	return pgxpool.NewWithConfig(ctx, pc)
}
