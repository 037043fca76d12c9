package main

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"sort"
	"strings"

	"github.com/idemgo/idem"
)

// A backend is a store the torture test can run against. Adding one (a
// Postgres ledger, say) means adding an entry to backends: a function that
// opens an idem.Store in the run's directory, and optionally a txRunner so
// that -mode tx works on it.
type backend struct {
	name string
	// watermark: the store keeps one watermark per job (StateFile), so a
	// job's periods are run in order, one pending at a time.
	watermark bool
	// tx: open returns a handle with a txRunner, so -mode tx is allowed.
	tx bool
	// open opens the store. dir is the run's directory, shared by the parent
	// and every worker; the store must be the same one for all of them.
	open func(ctx context.Context, dir string) (*handle, error)
}

// handle is an open store.
type handle struct {
	store idem.Store
	close func() error
	// tx is set when the store can commit business writes together with its
	// done marks (RunTx); nil otherwise.
	tx txRunner
}

// txRunner runs the tx mode's effect inside the store's own transaction.
type txRunner interface {
	// setup creates the business table of the tx mode (called once by the
	// parent, before the workers start).
	setup(ctx context.Context) error
	// runTx runs key with RunTx; fx applies the deliberately non-idempotent
	// effect (n = n + 1) through the transaction.
	runTx(ctx context.Context, key idem.Key, fx func(ctx context.Context, exec execer) error, opts ...idem.Option) error
	// counts returns how often the effect was applied, per key ("job/period").
	counts(ctx context.Context) (map[string]int, error)
}

// execer is what a transaction offers the effect.
type execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

var backends = map[string]*backend{
	"sqlite": {
		name: "sqlite",
		tx:   true,
		open: func(ctx context.Context, dir string) (*handle, error) {
			l, err := idem.OpenLedger(filepath.Join(dir, "ledger.db"))
			if err != nil {
				return nil, err
			}
			return &handle{store: l, close: l.Close, tx: sqliteTx{l}}, nil
		},
	},
	"statefile": {
		name:      "statefile",
		watermark: true,
		open: func(ctx context.Context, dir string) (*handle, error) {
			s, err := idem.OpenStateFile(filepath.Join(dir, "state.json"))
			if err != nil {
				return nil, err
			}
			return &handle{store: s, close: func() error { return nil }}, nil
		},
	},
}

func backendNames() string {
	var names []string
	for n := range backends {
		names = append(names, n)
	}
	sort.Strings(names)
	return strings.Join(names, "|")
}

// sqliteTx is the tx mode on a SQLite ledger: the effect is a row in the
// ledger's own database, written through Ledger.RunTx's *sql.Tx.
type sqliteTx struct{ l *idem.Ledger }

func (s sqliteTx) setup(ctx context.Context) error {
	_, err := s.l.DB().ExecContext(ctx, `CREATE TABLE IF NOT EXISTS effects(key TEXT PRIMARY KEY, n INTEGER NOT NULL)`)
	return err
}

func (s sqliteTx) runTx(ctx context.Context, key idem.Key, fx func(context.Context, execer) error, opts ...idem.Option) error {
	return s.l.RunTx(ctx, key, func(ctx context.Context, tx *sql.Tx) error { return fx(ctx, tx) }, opts...)
}

func (s sqliteTx) counts(ctx context.Context) (map[string]int, error) {
	rows, err := s.l.DB().QueryContext(ctx, `SELECT key, n FROM effects`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	m := map[string]int{}
	for rows.Next() {
		var k string
		var n int
		if err := rows.Scan(&k, &n); err != nil {
			return nil, err
		}
		m[k] = n
	}
	return m, rows.Err()
}

// txEffectSQL is the tx mode's effect: NOT idempotent on purpose, so that a
// second application shows as n = 2.
const txEffectSQL = `INSERT INTO effects(key, n) VALUES(?, 1) ON CONFLICT(key) DO UPDATE SET n = n + 1`

func checkCombo(b *backend, mode string) error {
	switch mode {
	case "atleastonce", "atmostonce", "twophase":
		return nil
	case "tx":
		if b.tx {
			return nil
		}
		return fmt.Errorf("-mode tx needs a store with RunTx; -store %s has none", b.name)
	}
	return fmt.Errorf("unknown -mode %q (want atleastonce|atmostonce|twophase|tx)", mode)
}
