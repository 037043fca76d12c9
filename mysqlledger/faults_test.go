package mysqlledger_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/idemgo/idem"
	"github.com/idemgo/idem/mysqlledger"
)

// The faults of a connection to the server, injected under database/sql
// by a connector that wraps the driver's: a reply lost after the server
// applied a write (the commit, or a statement outside a transaction, ran;
// the client sees the connection break, as when the network drops the
// answer), and a connection killed by the server (KILL CONNECTION, from
// another connection) right before a statement or a commit.
type faults struct {
	admin *sql.DB
	mu    sync.Mutex
	rnd   *rand.Rand
	// lose and kill are the chances of each fault per write (lose) and
	// per statement or commit (kill); 0 turns it off.
	lose, kill  atomic.Uint64 // chance(p): p in billionths
	lost, kills atomic.Int64  // how many were injected
	// only, if set, limits the faults to statements whose text contains it.
	only atomic.Pointer[string]
	// once turns kill off after its first kill, and lose after its first
	// lost reply.
	once atomic.Bool
	// armKill and armLose break the next write once (see
	// idemtest.FaultHarness): a statement in a transaction, a statement
	// outside one that writes (Exec), or a commit. struck says one did.
	armKill, armLose, struck atomic.Bool
}

func (f *faults) roll(p *atomic.Uint64, query string) bool {
	if o := f.only.Load(); o != nil && query != "" && !strings.Contains(query, *o) {
		return false
	}
	chance := float64frombits(p.Load())
	if chance == 0 {
		return false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.rnd.Float64() < chance
}

func float64frombits(b uint64) float64 { return float64(int64(b)) / 1e9 }
func chance(p float64) uint64          { return uint64(int64(p * 1e9)) }

// errLost is what the client sees when the reply to an applied write is
// lost: the driver's own error for a connection that broke mid-read.
var errLost = fmt.Errorf("fault: the reply was lost after the server applied the write: %w", mysql.ErrInvalidConn)

// openFaultyDB opens the test database through a connector that injects f.
func openFaultyDB(t testing.TB, f *faults) *sql.DB {
	t.Helper()
	cfg, err := mysql.ParseDSN(testDSN(t))
	if err != nil {
		t.Fatal(err)
	}
	inner, err := mysql.NewConnector(cfg)
	if err != nil {
		t.Fatal(err)
	}
	db := sql.OpenDB(&faultConnector{inner: inner, f: f})
	t.Cleanup(func() { db.Close() })
	return db
}

type faultConnector struct {
	inner driver.Connector
	f     *faults
}

func (c *faultConnector) Driver() driver.Driver { return c.inner.Driver() }

func (c *faultConnector) Connect(ctx context.Context) (driver.Conn, error) {
	conn, err := c.inner.Connect(ctx)
	if err != nil {
		return nil, err
	}
	rows, err := conn.(driver.QueryerContext).QueryContext(ctx, `SELECT CONNECTION_ID()`, nil)
	if err != nil {
		conn.Close()
		return nil, err
	}
	v := make([]driver.Value, 1)
	err = rows.Next(v)
	rows.Close()
	if err != nil {
		conn.Close()
		return nil, err
	}
	var id int64
	switch x := v[0].(type) {
	case int64:
		id = x
	case []byte:
		fmt.Sscan(string(x), &id)
	}
	return &faultConn{inner: conn, f: c.f, id: id}, nil
}

// faultConn is a connection of the driver with faults.
type faultConn struct {
	inner driver.Conn
	f     *faults
	id    int64
	inTx  bool
	bad   bool
}

// killed kills the connection on the server, from the admin connection, if
// the dice say so, or if armed and the statement is a write (write: an Exec,
// a statement in a transaction, or a commit).
func (c *faultConn) killed(query string, write bool) {
	if (write || c.inTx) && c.f.armKill.CompareAndSwap(true, false) {
		if _, err := c.f.admin.Exec(fmt.Sprintf(`KILL CONNECTION %d`, c.id)); err == nil {
			c.f.kills.Add(1)
			c.f.struck.Store(true)
		}
		return
	}
	if c.f.roll(&c.f.kill, query) {
		if c.f.once.Load() {
			c.f.kill.Store(0)
		}
		if _, err := c.f.admin.Exec(fmt.Sprintf(`KILL CONNECTION %d`, c.id)); err == nil {
			c.f.kills.Add(1)
		}
	}
}

// lose breaks the connection after a write the server applied.
func (c *faultConn) lose() error {
	if c.f.once.Load() {
		c.f.lose.Store(0)
	}
	c.f.lost.Add(1)
	c.f.struck.Store(true)
	c.bad = true
	c.inner.Close()
	return errLost
}

func (c *faultConn) Prepare(query string) (driver.Stmt, error) { return c.inner.Prepare(query) }
func (c *faultConn) Close() error                              { return c.inner.Close() }
func (c *faultConn) Begin() (driver.Tx, error)                 { return nil, errors.New("Begin without a context") }

// PrepareContext: without interpolateParams, database/sql runs a
// statement with arguments as a prepared statement; its executions get
// the same faults as ExecContext's and QueryContext's.
func (c *faultConn) PrepareContext(ctx context.Context, query string) (driver.Stmt, error) {
	st, err := c.inner.(driver.ConnPrepareContext).PrepareContext(ctx, query)
	if err != nil {
		return nil, err
	}
	return &faultStmt{inner: st, c: c, query: query}, nil
}

// faultStmt is a prepared statement of a faultConn.
type faultStmt struct {
	inner driver.Stmt
	c     *faultConn
	query string
}

func (s *faultStmt) Close() error  { return s.inner.Close() }
func (s *faultStmt) NumInput() int { return s.inner.NumInput() }
func (s *faultStmt) Exec([]driver.Value) (driver.Result, error) {
	return nil, errors.New("Exec without a context")
}
func (s *faultStmt) Query([]driver.Value) (driver.Rows, error) {
	return nil, errors.New("Query without a context")
}

func (s *faultStmt) ExecContext(ctx context.Context, args []driver.NamedValue) (driver.Result, error) {
	s.c.killed(s.query, true)
	res, err := s.inner.(driver.StmtExecContext).ExecContext(ctx, args)
	if err == nil && !s.c.inTx && (s.c.f.armLose.CompareAndSwap(true, false) || s.c.f.roll(&s.c.f.lose, s.query)) {
		return nil, s.c.lose()
	}
	return res, err
}

func (s *faultStmt) QueryContext(ctx context.Context, args []driver.NamedValue) (driver.Rows, error) {
	s.c.killed(s.query, false)
	return s.inner.(driver.StmtQueryContext).QueryContext(ctx, args)
}

func (s *faultStmt) CheckNamedValue(nv *driver.NamedValue) error {
	if ch, ok := s.inner.(driver.NamedValueChecker); ok {
		return ch.CheckNamedValue(nv)
	}
	return s.c.CheckNamedValue(nv)
}

func (c *faultConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	tx, err := c.inner.(driver.ConnBeginTx).BeginTx(ctx, opts)
	if err != nil {
		return nil, err
	}
	c.inTx = true
	return &faultTx{inner: tx, c: c}, nil
}

func (c *faultConn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	c.killed(query, true)
	res, err := c.inner.(driver.ExecerContext).ExecContext(ctx, query, args)
	if err == nil && !c.inTx && (c.f.armLose.CompareAndSwap(true, false) || c.f.roll(&c.f.lose, query)) {
		return nil, c.lose()
	}
	return res, err
}

func (c *faultConn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	c.killed(query, false)
	return c.inner.(driver.QueryerContext).QueryContext(ctx, query, args)
}

func (c *faultConn) Ping(ctx context.Context) error { return c.inner.(driver.Pinger).Ping(ctx) }

func (c *faultConn) ResetSession(ctx context.Context) error {
	if c.bad {
		return driver.ErrBadConn
	}
	return c.inner.(driver.SessionResetter).ResetSession(ctx)
}

func (c *faultConn) IsValid() bool { return !c.bad && c.inner.(driver.Validator).IsValid() }

func (c *faultConn) CheckNamedValue(nv *driver.NamedValue) error {
	return c.inner.(driver.NamedValueChecker).CheckNamedValue(nv)
}

type faultTx struct {
	inner driver.Tx
	c     *faultConn
}

func (t *faultTx) Commit() error {
	t.c.killed("", true)
	t.c.inTx = false
	if err := t.inner.Commit(); err != nil {
		return err
	}
	if t.c.f.armLose.CompareAndSwap(true, false) || t.c.f.roll(&t.c.f.lose, "") {
		return t.c.lose()
	}
	return nil
}

func (t *faultTx) Rollback() error {
	t.c.inTx = false
	return t.inner.Rollback()
}

func init() {
	// The driver logs every broken connection; the faults break many.
	_ = mysql.SetLogger(log.New(io.Discard, "", 0))
}

func newFaults(t testing.TB, seed uint64) *faults {
	return &faults{admin: openDB(t), rnd: rand.New(rand.NewPCG(seed, seed))}
}

// TestDoneMarkAfterLostReply: the reply to the done mark (its
// autocommitted UPDATE) is lost after the server applied it. Run retries the done mark, finds the
// record done by its attempt, and reports the run done: fn ran once, the
// key is done by attempt 1.
func TestDoneMarkAfterLostReply(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, mode := range []struct {
		name string
		opt  idem.Option
	}{{"at-least-once", idem.AtLeastOnce()}, {"at-most-once", idem.AtMostOnce()}} {
		t.Run(mode.name, func(t *testing.T) {
			t.Parallel()
			f := newFaults(t, 1)
			l := openLedger(t, openFaultyDB(t, f))
			key := idem.Key{Job: "settle", Period: "2026-12-05"}
			ran := 0
			var res idem.Result
			err := l.Run(ctx, key, func(context.Context) error {
				ran++
				only := "SET status = ?" // the done mark's UPDATE (autocommitted), or its commit
				f.only.Store(&only)
				f.once.Store(true) // one reply lost: the retry's answer comes back
				f.lose.Store(chance(1))
				return nil
			}, mode.opt, idem.ReportTo(&res), idem.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
			f.lose.Store(0)
			if f.lost.Load() == 0 {
				t.Fatal("no reply was lost")
			}
			if err != nil || res.Outcome != idem.Ran || ran != 1 {
				t.Fatalf("Run: %v (%s), fn ran %d times; want ran once", err, res.Outcome, ran)
			}
			rec, ok, err := l.Lookup(ctx, key)
			if err != nil || !ok || rec.Status != idem.StatusDone || rec.Attempt != 1 {
				t.Fatalf("record %+v (%v, %v), want done by attempt 1", rec, ok, err)
			}
		})
	}
}

// TestDoneMarkAfterConnectionKilled: right after fn, the server kills the
// connection of the done mark's first statement (KILL CONNECTION) before
// the statement runs. The done mark's first try fails on the dead
// connection; Run retries it on a new one, and the key
// is done: fn ran once.
func TestDoneMarkAfterConnectionKilled(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFaults(t, 2)
	db := openFaultyDB(t, f)
	db.SetMaxIdleConns(10)
	l := openLedger(t, db)
	key := idem.Key{Job: "settle", Period: "2026-12-05"}
	ran := 0
	var res idem.Result
	err := l.Run(ctx, key, func(context.Context) error {
		ran++
		f.once.Store(true)
		f.kill.Store(chance(1)) // the next statement's connection is killed before it runs
		return nil
	}, idem.AtMostOnce(), idem.ReportTo(&res), idem.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))),
		idem.WithLease(time.Minute))
	f.kill.Store(0)
	if f.kills.Load() == 0 {
		t.Fatal("no connection was killed")
	}
	if err != nil || res.Outcome != idem.Ran || ran != 1 {
		t.Fatalf("Run: %v (%s), fn ran %d times; want ran once (%d connections killed)", err, res.Outcome, ran, f.kills.Load())
	}
	if rec, ok, err := l.Lookup(ctx, key); err != nil || !ok || rec.Status != idem.StatusDone || rec.Attempt != 1 {
		t.Fatalf("record %+v (%v, %v), want done by attempt 1", rec, ok, err)
	}
}

// TestRunTxUnderFaults: 8 workers run RunTx over 200 keys until every key
// is done, while replies to applied writes are lost (5 % of writes and
// commits) and connections are killed by the server (5 % of statements),
// anywhere in the ledger's protocol and the business write. The business
// write is NOT idempotent (n = n + 1): whatever failed, every key is done
// and its business row was committed exactly once: 0 duplicates, 0 lost.
func TestRunTxUnderFaults(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFaults(t, 3)
	db := openFaultyDB(t, f)
	l := openLedger(t, db, mysqlledger.WithRunOptions(idem.WithLease(300*time.Millisecond),
		idem.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil)))))
	if _, err := openDB(t).Exec(`CREATE TABLE ` + l.Table("model_effects") + ` (job VARBINARY(255) NOT NULL, period VARBINARY(255) NOT NULL,
		n INT NOT NULL, PRIMARY KEY (job, period))`); err != nil {
		t.Fatal(err)
	}
	const keys = 200
	f.armLose.Store(true) // the first write's reply is lost, whatever the dice say
	f.lose.Store(chance(0.05))
	f.kill.Store(chance(0.05))
	var wg sync.WaitGroup
	var errs atomic.Int64
	deadline := time.Now().Add(2 * time.Minute)
	for w := range 8 {
		wg.Go(func() {
			seen := map[idem.Key]bool{} // done, as this worker saw: a key done stays done
			for round := 0; time.Now().Before(deadline); round++ {
				for i := range keys {
					k := idem.Key{Job: "pay", Period: fmt.Sprintf("invoice-%03d", (i+w)%keys+1)}
					if seen[k] {
						continue
					}
					rec, ok, err := l.Lookup(ctx, k)
					if err == nil && ok && rec.Status == idem.StatusDone {
						seen[k] = true
						continue
					}
					err = l.RunTx(ctx, k, func(ctx context.Context, tx *sql.Tx) error {
						_, err := tx.ExecContext(ctx, `INSERT INTO `+l.Table("model_effects")+` (job, period, n) VALUES (?, ?, 1)
							ON DUPLICATE KEY UPDATE n = n + 1`, k.Job, k.Period)
						return err
					}, idem.WithBackoff(idem.Constant(time.Millisecond)))
					if err != nil {
						errs.Add(1)
					}
				}
				if len(seen) == keys {
					return
				}
			}
		})
	}
	wg.Wait()
	f.lose.Store(0)
	f.kill.Store(0)
	t.Logf("%d replies lost, %d connections killed, %d RunTx calls failed", f.lost.Load(), f.kills.Load(), errs.Load())
	if f.lost.Load() == 0 || f.kills.Load() == 0 {
		t.Errorf("too few faults injected: %d lost, %d killed", f.lost.Load(), f.kills.Load())
	}
	got := queryCounts(t, openDB(t), `SELECT period, n FROM `+l.Table("model_effects"))
	dup, lost := 0, 0
	for i := range keys {
		p := fmt.Sprintf("invoice-%03d", i+1)
		rec, ok, err := l.Lookup(ctx, idem.Key{Job: "pay", Period: p})
		switch {
		case err != nil:
			t.Fatal(err)
		case !ok || rec.Status != idem.StatusDone:
			lost++
			t.Errorf("key %s not done: %+v", p, rec)
		case got[p] == 0:
			lost++
			t.Errorf("key %s done without its business row", p)
		case got[p] > 1:
			dup++
			t.Errorf("key %s: business row committed %d times", p, got[p])
		}
	}
	t.Logf("%d keys: %d duplicated, %d lost", keys, dup, lost)
}
