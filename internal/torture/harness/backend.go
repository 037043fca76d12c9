package harness

import (
	"context"
	"database/sql"
	"flag"
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"sync"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/outbox"
)

// A Backend is a store the torture test can run against. The sqlite and
// statefile backends are built in; a command registers others ([Register])
// before it calls [Main] (the Postgres ledger's, in the pgledger module, so
// that this module never depends on a database driver).
type Backend struct {
	Name string
	// Watermark: the store keeps one watermark per job (StateFile), so a
	// job's periods are run in order, one pending at a time.
	Watermark bool
	// Tx: Open returns a Handle with a TxRunner, so -mode tx is allowed.
	Tx bool
	// Outbox: Open returns a Handle with an OutboxRunner, so -mode outbox
	// is allowed.
	Outbox bool
	// Flags, if set, adds the backend's flags to the command's.
	Flags func(fs *flag.FlagSet)
	// Prepare, if set, is called once by the parent, before anything else,
	// to set up the run's store (a database schema, say). loc is passed to
	// every Open of the run, the workers' included (in their environment);
	// desc is printed in the run's header. An error wrapped by [UsageError]
	// is a usage error (exit 2, with the usage).
	Prepare func(ctx context.Context, dir string) (loc, desc string, err error)
	// Open opens the store. dir is the run's directory, shared by the parent
	// and every worker; dir and loc must name the same store for all of
	// them.
	Open func(ctx context.Context, dir, loc string) (*Handle, error)
	// Cleanup, if set, removes what Prepare set up; it is called when the
	// run's directory is removed (not when it is kept for a look).
	Cleanup func(ctx context.Context, loc string) error
}

// Handle is an open store.
type Handle struct {
	Store idem.Store
	Close func() error
	// Tx is set when the store can commit business writes together with its
	// done marks (RunTx); nil otherwise.
	Tx TxRunner
	// Outbox is set when the store has an outbox (outbox.Put in RunTx, and
	// the relay's side); nil otherwise.
	Outbox OutboxRunner
}

// TxRunner runs the tx mode's effect inside the store's own transaction.
type TxRunner interface {
	// Setup creates the business table of the tx mode (called once by the
	// parent, before the workers start).
	Setup(ctx context.Context) error
	// RunTx runs key with the store's RunTx. fn is the attempt: it calls
	// bump, which applies the deliberately non-idempotent effect (n = n + 1
	// of key's row) through the transaction.
	RunTx(ctx context.Context, key idem.Key, fn func(ctx context.Context, bump func(context.Context) error) error, opts ...idem.Option) error
	// Counts returns how often the effect was applied, per key
	// ("job/period").
	Counts(ctx context.Context) (map[string]int, error)
}

// UsageError marks err as a usage error: a bad flag or combination (exit
// 2, with the usage).
func UsageError(err error) error { return usageError{err} }

var (
	backendsMu sync.Mutex
	backends   = map[string]*Backend{
		"sqlite": {
			Name:   "sqlite",
			Tx:     true,
			Outbox: true,
			Open: func(ctx context.Context, dir, _ string) (*Handle, error) {
				l, err := idem.OpenLedger(filepath.Join(dir, "ledger.db"))
				if err != nil {
					return nil, err
				}
				return &Handle{Store: l, Close: l.Close, Tx: sqliteTx{l}, Outbox: sqliteOutbox{l}}, nil
			},
		},
		"statefile": {
			Name:      "statefile",
			Watermark: true,
			Open: func(ctx context.Context, dir, _ string) (*Handle, error) {
				s, err := idem.OpenStateFile(filepath.Join(dir, "state.json"))
				if err != nil {
					return nil, err
				}
				return &Handle{Store: s, Close: func() error { return nil }}, nil
			},
		},
	}
	// elsewhere names the stores whose backend lives in another module.
	elsewhere = map[string]string{
		"postgres": "-store postgres is in the pgledger module: cd pgledger && go run ./internal/torture -store postgres",
		"redis":    "-store redis is in the redisstore module: cd redisstore && go run ./internal/torture -store redis",
	}
)

// Register adds a backend. Call it before [Main], [Run] or [RunWorker]: in
// main, and in a test binary's TestMain (the workers are that binary, too).
func Register(b *Backend) {
	backendsMu.Lock()
	defer backendsMu.Unlock()
	if b.Name == "" || b.Open == nil {
		panic("torture: Register of a backend without a name or Open")
	}
	if _, dup := backends[b.Name]; dup {
		panic("torture: backend " + b.Name + " registered twice")
	}
	backends[b.Name] = b
}

func backend(name string) *Backend {
	backendsMu.Lock()
	defer backendsMu.Unlock()
	return backends[name]
}

func backendNames() string {
	backendsMu.Lock()
	defer backendsMu.Unlock()
	var names []string
	for n := range backends {
		names = append(names, n)
	}
	sort.Strings(names)
	return strings.Join(names, "|")
}

func unknownStore(name string) error {
	if hint, ok := elsewhere[name]; ok {
		return fmt.Errorf("unknown -store %q here (want %s); %s", name, backendNames(), hint)
	}
	return fmt.Errorf("unknown -store %q (want %s)", name, backendNames())
}

// sqliteTx is the tx mode on a SQLite ledger: the effect is a row in the
// ledger's own database, written through Ledger.RunTx's *sql.Tx.
type sqliteTx struct{ l *idem.Ledger }

func (s sqliteTx) Setup(ctx context.Context) error {
	_, err := s.l.DB().ExecContext(ctx, `CREATE TABLE IF NOT EXISTS effects(key TEXT PRIMARY KEY, n INTEGER NOT NULL)`)
	return err
}

// sqliteEffectSQL is the tx mode's effect: NOT idempotent on purpose, so
// that a second application shows as n = 2.
const sqliteEffectSQL = `INSERT INTO effects(key, n) VALUES(?, 1) ON CONFLICT(key) DO UPDATE SET n = n + 1`

func (s sqliteTx) RunTx(ctx context.Context, key idem.Key, fn func(context.Context, func(context.Context) error) error, opts ...idem.Option) error {
	return s.l.RunTx(ctx, key, func(ctx context.Context, tx *sql.Tx) error {
		return fn(ctx, func(ctx context.Context) error {
			_, err := tx.ExecContext(ctx, sqliteEffectSQL, key.String())
			return err
		})
	}, opts...)
}

func (s sqliteTx) Counts(ctx context.Context) (map[string]int, error) {
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

func checkCombo(b *Backend, mode string) error {
	switch mode {
	case "atleastonce", "atmostonce", "twophase":
		return nil
	case "tx":
		if b.Tx {
			return nil
		}
		return fmt.Errorf("-mode tx needs a store with RunTx; -store %s has none", b.Name)
	case "outbox":
		if b.Outbox {
			return nil
		}
		return fmt.Errorf("-mode outbox needs a store with an outbox; -store %s has none", b.Name)
	}
	return fmt.Errorf("unknown -mode %q (want atleastonce|atmostonce|twophase|tx|outbox)", mode)
}

// sqliteOutbox is the outbox mode on a SQLite ledger: the business row in
// the ledger's own database, the messages in its outbox, both written
// through Ledger.RunTx's *sql.Tx.
type sqliteOutbox struct{ l *idem.Ledger }

func (s sqliteOutbox) Setup(ctx context.Context) error {
	_, err := s.l.DB().ExecContext(ctx, `CREATE TABLE IF NOT EXISTS outbox_effects(key TEXT PRIMARY KEY, n INTEGER NOT NULL, nonce TEXT NOT NULL)`)
	return err
}

func (s sqliteOutbox) RunTx(ctx context.Context, key idem.Key, fn func(context.Context, OutboxTx) error, opts ...idem.Option) error {
	return s.l.RunTx(ctx, key, func(ctx context.Context, tx *sql.Tx) error {
		return fn(ctx, sqliteOutboxTx{key: key, tx: tx})
	}, opts...)
}

type sqliteOutboxTx struct {
	key idem.Key
	tx  *sql.Tx
}

func (t sqliteOutboxTx) Bump(ctx context.Context, nonce string) error {
	// NOT idempotent on purpose, so that a second application shows as n = 2.
	_, err := t.tx.ExecContext(ctx, `INSERT INTO outbox_effects(key, n, nonce) VALUES(?, 1, ?)
		ON CONFLICT(key) DO UPDATE SET n = n + 1, nonce = excluded.nonce`, t.key.String(), nonce)
	return err
}

func (t sqliteOutboxTx) Put(ctx context.Context, msg outbox.Message) (string, error) {
	return outbox.Put(ctx, t.tx, msg)
}

func (s sqliteOutbox) Rows(ctx context.Context) (map[string]Row, error) {
	rows, err := s.l.DB().QueryContext(ctx, `SELECT key, n, nonce FROM outbox_effects`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	m := map[string]Row{}
	for rows.Next() {
		var k string
		var r Row
		if err := rows.Scan(&k, &r.N, &r.Nonce); err != nil {
			return nil, err
		}
		m[k] = r
	}
	return m, rows.Err()
}

func (s sqliteOutbox) Store() OutboxStore { return s.l }
