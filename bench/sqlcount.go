package main

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/idemgo/idem"
	"modernc.org/sqlite"
)

// With -count-sql, every SQLite database of the comparisons is opened
// through a wrapper of modernc's driver that counts the statements each
// side runs: reads (SELECT), writes (INSERT, UPDATE, DELETE), transaction
// control (BEGIN, COMMIT, ROLLBACK) and PRAGMAs. idem's ledger is then
// attached with idem.NewLedger to such a database instead of OpenLedger;
// nothing else changes.
var countSQL bool

// sqlCount counts the statements run on the databases of one role:
// "idem", "floor" or "river".
type sqlCount struct {
	reads, writes, tx, pragmas atomic.Int64
	trips                      atomic.Int64 // round trips to a Postgres server (pgTracer)
}

var (
	countsMu sync.Mutex
	counts   = map[string]*sqlCount{}
)

func countFor(role string) *sqlCount {
	countsMu.Lock()
	defer countsMu.Unlock()
	c := counts[role]
	if c == nil {
		c = &sqlCount{}
		counts[role] = c
	}
	return c
}

type countSnapshot struct{ reads, writes, tx, pragmas, trips int64 }

func (c *sqlCount) snapshot() countSnapshot {
	return countSnapshot{c.reads.Load(), c.writes.Load(), c.tx.Load(), c.pragmas.Load(), c.trips.Load()}
}

func (a countSnapshot) sub(b countSnapshot) countSnapshot {
	return countSnapshot{a.reads - b.reads, a.writes - b.writes, a.tx - b.tx, a.pragmas - b.pragmas, a.trips - b.trips}
}

func (a countSnapshot) add(b countSnapshot) countSnapshot {
	return countSnapshot{a.reads + b.reads, a.writes + b.writes, a.tx + b.tx, a.pragmas + b.pragmas, a.trips + b.trips}
}

// perOp formats the counts per operation.
func (a countSnapshot) perOp(ops int) string {
	if ops == 0 {
		return "-"
	}
	f := func(x int64) string {
		if v := float64(x) / float64(ops); v != 0 && v < 0.1 {
			return fmt.Sprintf("%.4f", v) // a fan-out's statements per item
		}
		return fmt.Sprintf("%.2f", float64(x)/float64(ops))
	}
	if a.trips > 0 { // Postgres: SET and set_config count as pragmas
		return "round trips " + f(a.trips) + " (reads " + f(a.reads) + " writes " + f(a.writes) + " begin/commit " + f(a.tx) + " settings " + f(a.pragmas) + ")"
	}
	return "reads " + f(a.reads) + " writes " + f(a.writes) + " begin/commit " + f(a.tx) + " pragmas " + f(a.pragmas)
}

func (c *sqlCount) count(query string) {
	q := strings.TrimSpace(query)
	for { // River's sqlc queries start with comments
		if rest, ok := strings.CutPrefix(q, "--"); ok {
			_, rest, _ = strings.Cut(rest, "\n")
			q = strings.TrimSpace(rest)
		} else if rest, ok := strings.CutPrefix(q, "/*"); ok {
			_, rest, _ = strings.Cut(rest, "*/")
			q = strings.TrimSpace(rest)
		} else {
			break
		}
	}
	words := strings.FieldsFunc(q, func(r rune) bool { return r == ' ' || r == '\n' || r == '\t' || r == '(' })
	if len(words) == 0 {
		return
	}
	switch strings.ToUpper(words[0]) {
	case "SELECT", "WITH":
		if strings.Contains(q, "set_config(") {
			c.pragmas.Add(1)
			return
		}
		c.reads.Add(1)
	case "BEGIN", "COMMIT", "ROLLBACK", "END", "SAVEPOINT", "RELEASE":
		c.tx.Add(1)
	case "PRAGMA", "SET":
		c.pragmas.Add(1)
	default:
		c.writes.Add(1)
	}
}

// openSQLite opens the SQLite database at path with idem's DSN; with
// -count-sql, through the counting wrapper, counted for role.
func openSQLite(path, role string) (*sql.DB, error) {
	if !countSQL {
		return sql.Open("sqlite", sqliteDSN(path))
	}
	return sql.OpenDB(&countingConnector{dsn: sqliteDSN(path), c: countFor(role)}), nil
}

// openLedger opens idem's ledger at path: idem.OpenLedger, or with
// -count-sql idem.NewLedger on a counted database.
func openLedger(ctx context.Context, path string) (*idem.Ledger, func(), error) {
	if !countSQL {
		l, err := idem.OpenLedger(path)
		if err != nil {
			return nil, nil, err
		}
		return l, func() { l.Close() }, nil
	}
	db, err := openSQLite(path, "idem")
	if err != nil {
		return nil, nil, err
	}
	l, err := idem.NewLedger(ctx, db)
	if err != nil {
		db.Close()
		return nil, nil, err
	}
	return l, func() { l.Close(); db.Close() }, nil
}

type countingConnector struct {
	dsn string
	c   *sqlCount
}

func (k *countingConnector) Connect(context.Context) (driver.Conn, error) {
	cn, err := (&sqlite.Driver{}).Open(k.dsn)
	if err != nil {
		return nil, err
	}
	return &countConn{Conn: cn, c: k.c}, nil
}

func (k *countingConnector) Driver() driver.Driver { return &sqlite.Driver{} }

// countConn forwards to modernc's connection, counting statements.
type countConn struct {
	driver.Conn
	c *sqlCount
}

func (w *countConn) Prepare(q string) (driver.Stmt, error) {
	return w.PrepareContext(context.Background(), q)
}

func (w *countConn) PrepareContext(ctx context.Context, q string) (driver.Stmt, error) {
	s, err := w.Conn.(driver.ConnPrepareContext).PrepareContext(ctx, q)
	if err != nil {
		return nil, err
	}
	return &countStmt{Stmt: s, q: q, c: w.c}, nil
}

func (w *countConn) Begin() (driver.Tx, error) {
	return w.BeginTx(context.Background(), driver.TxOptions{})
}

func (w *countConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	tx, err := w.Conn.(driver.ConnBeginTx).BeginTx(ctx, opts)
	if err != nil {
		return nil, err
	}
	w.c.tx.Add(1)
	return &countTx{Tx: tx, c: w.c}, nil
}

func (w *countConn) ExecContext(ctx context.Context, q string, args []driver.NamedValue) (driver.Result, error) {
	w.c.count(q)
	return w.Conn.(driver.ExecerContext).ExecContext(ctx, q, args)
}

func (w *countConn) QueryContext(ctx context.Context, q string, args []driver.NamedValue) (driver.Rows, error) {
	w.c.count(q)
	return w.Conn.(driver.QueryerContext).QueryContext(ctx, q, args)
}

func (w *countConn) ResetSession(ctx context.Context) error {
	if r, ok := w.Conn.(driver.SessionResetter); ok {
		return r.ResetSession(ctx)
	}
	return nil
}

func (w *countConn) IsValid() bool {
	if v, ok := w.Conn.(driver.Validator); ok {
		return v.IsValid()
	}
	return true
}

type countTx struct {
	driver.Tx
	c *sqlCount
}

func (t *countTx) Commit() error   { t.c.tx.Add(1); return t.Tx.Commit() }
func (t *countTx) Rollback() error { t.c.tx.Add(1); return t.Tx.Rollback() }

type countStmt struct {
	driver.Stmt
	q string
	c *sqlCount
}

func (s *countStmt) ExecContext(ctx context.Context, args []driver.NamedValue) (driver.Result, error) {
	s.c.count(s.q)
	return s.Stmt.(driver.StmtExecContext).ExecContext(ctx, args)
}

func (s *countStmt) QueryContext(ctx context.Context, args []driver.NamedValue) (driver.Rows, error) {
	s.c.count(s.q)
	return s.Stmt.(driver.StmtQueryContext).QueryContext(ctx, args)
}
