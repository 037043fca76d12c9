package main

import (
	"context"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/internal/torture/harness"
	"github.com/idemgo/idem/outbox"
	"github.com/jackc/pgx/v5"
)

// pgOutbox is the outbox mode on the Postgres ledger: the business row is
// in a table of the ledger's schema and the messages in its outbox, both
// written through RunTx's transaction (a pgx.Tx on a pool, a *sql.Tx on a
// *sql.DB). Setup and Rows use a connection of their own.
type pgOutbox struct {
	loc   pgLoc
	store harness.OutboxStore
	runTx func(ctx context.Context, key idem.Key, fn func(ctx context.Context, tx pgOutboxTx) error, opts ...idem.Option) error
}

// pgOutboxTx is one attempt's transaction: a statement, and outbox.Put.
type pgOutboxTx struct {
	exec func(ctx context.Context, q string, args ...any) error
	put  func(ctx context.Context, msg outbox.Message) (string, error)
}

// outboxRunTxOf is pgOutbox.runTx for a ledger whose transactions are T.
func outboxRunTxOf[T any](runTx func(context.Context, idem.Key, func(context.Context, T) error, ...idem.Option) error,
	exec func(ctx context.Context, tx T, q string, args ...any) error) func(context.Context, idem.Key, func(context.Context, pgOutboxTx) error, ...idem.Option) error {
	return func(ctx context.Context, key idem.Key, fn func(context.Context, pgOutboxTx) error, opts ...idem.Option) error {
		return runTx(ctx, key, func(ctx context.Context, tx T) error {
			return fn(ctx, pgOutboxTx{
				exec: func(ctx context.Context, q string, args ...any) error { return exec(ctx, tx, q, args...) },
				put:  func(ctx context.Context, msg outbox.Message) (string, error) { return outbox.Put(ctx, tx, msg) },
			})
		}, opts...)
	}
}

func (p pgOutbox) table() string { return pgx.Identifier{p.loc.Schema, "outbox_effects"}.Sanitize() }

func (p pgOutbox) Setup(ctx context.Context) error {
	conn, err := pgx.Connect(ctx, p.loc.DSN)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+p.table()+` (key text PRIMARY KEY, n int NOT NULL, nonce text NOT NULL)`)
	return err
}

func (p pgOutbox) RunTx(ctx context.Context, key idem.Key, fn func(context.Context, harness.OutboxTx) error, opts ...idem.Option) error {
	// NOT idempotent on purpose, so that a second application shows as n = 2.
	bump := `INSERT INTO ` + p.table() + ` AS e (key, n, nonce) VALUES ($1, 1, $2) ON CONFLICT (key) DO UPDATE SET n = e.n + 1, nonce = excluded.nonce`
	return p.runTx(ctx, key, func(ctx context.Context, tx pgOutboxTx) error {
		return fn(ctx, pgAttempt{key: key, bump: bump, tx: tx})
	}, opts...)
}

// pgAttempt is harness.OutboxTx on a pgOutboxTx.
type pgAttempt struct {
	key  idem.Key
	bump string
	tx   pgOutboxTx
}

func (a pgAttempt) Bump(ctx context.Context, nonce string) error {
	return a.tx.exec(ctx, a.bump, a.key.String(), nonce)
}

func (a pgAttempt) Put(ctx context.Context, msg outbox.Message) (string, error) {
	return a.tx.put(ctx, msg)
}

func (p pgOutbox) Rows(ctx context.Context) (map[string]harness.Row, error) {
	conn, err := pgx.Connect(ctx, p.loc.DSN)
	if err != nil {
		return nil, err
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `SELECT key, n, nonce FROM `+p.table())
	if err != nil {
		return nil, err
	}
	m := map[string]harness.Row{}
	var k string
	var r harness.Row
	if _, err := pgx.ForEachRow(rows, []any{&k, &r.N, &r.Nonce}, func() error { m[k] = r; return nil }); err != nil {
		return nil, err
	}
	return m, nil
}

func (p pgOutbox) Store() harness.OutboxStore { return p.store }
