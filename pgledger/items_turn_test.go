package pgledger_test

import (
	"context"
	"database/sql"
	"errors"
	"iter"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemtest"
	"github.com/idemgo/idem/internal/testwait"
	"github.com/idemgo/idem/pgledger"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// The turn to record a period's item set (RecordTurn): one caller at a
// time records it; the others wait for the set, then find it sealed and
// generate nothing. These tests tell the callers' connections apart by
// their application_name in pg_stat_activity.

// turnItems is the size of the item set in these tests: the first 500
// make the first chunk, recorded as soon as they are generated.
const turnItems = 1200

// turnLedger is either kind of ledger.
type turnLedger interface {
	idem.Store
	Schema() string
}

// withApp is the test database's DSN with application_name app, and the
// server settings params ("name=value"), which the drivers send when they
// connect.
func withApp(t testing.TB, app string, params ...string) string {
	dsn := testDSN(t)
	sep := "?"
	if strings.Contains(dsn, "?") {
		sep = "&"
	}
	return dsn + sep + strings.Join(append([]string{"application_name=" + app}, params...), "&")
}

// openAs opens a ledger through a pool of its own whose connections are
// named app (with the server settings params, as withApp), of at most
// maxConns connections (0: the driver's default): on a pgx pool when driver
// is "", else on a *sql.DB of driver. It uses schema, or a fresh one
// (dropped when t ends) when schema is "".
func openAs(t testing.TB, driver, schema, app string, maxConns int, params ...string) turnLedger {
	t.Helper()
	ctx := context.Background()
	if schema == "" {
		schema = uniqueName("idemtest_")
		dropSchemaLater(t, newPool(t), schema)
	}
	if driver == "" {
		cfg, err := pgxpool.ParseConfig(withApp(t, app, params...))
		if err != nil {
			t.Fatal(err)
		}
		if maxConns > 0 {
			cfg.MaxConns = int32(maxConns)
		}
		pool, err := pgxpool.NewWithConfig(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(pool.Close)
		l, err := pgledger.New(ctx, pool, pgledger.WithSchema(schema))
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	db, err := sql.Open(driver, withApp(t, app, params...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	db.SetMaxOpenConns(maxConns)
	l, err := pgledger.NewDB(ctx, db, pgledger.WithSchema(schema))
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// eachPool runs test as a parallel subtest for a pgx pool (driver "") and
// for each database/sql driver.
func eachPool(t *testing.T, test func(t *testing.T, driver string)) {
	for _, driver := range append([]string{""}, sqlDrivers...) {
		name := driver
		if name == "" {
			name = "pgxpool"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			test(t, driver)
		})
	}
}

// advisoryLocks counts the advisory locks that the connections named app
// hold (granted) or wait for (not granted).
func advisoryLocks(t testing.TB, pool *pgxpool.Pool, app string, granted bool) int {
	t.Helper()
	var n int
	err := pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_locks AS l JOIN pg_stat_activity AS a ON a.pid = l.pid
		WHERE l.locktype = 'advisory' AND l.granted = $2 AND a.application_name = $1`, app, granted).Scan(&n)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// blockingItems generates the turnItems items, and stops before the
// 601st: it closes reached, then waits for goOn (forever if nil).
func blockingItems(reached chan<- struct{}, goOn <-chan struct{}) iter.Seq2[string, error] {
	return func(yield func(string, error) bool) {
		for i, it := range accountList(turnItems) {
			if i == 600 {
				close(reached)
				if goOn == nil {
					select {}
				}
				<-goOn
			}
			if !yield(it, nil) {
				return
			}
		}
	}
}

// countedItems generates the turnItems items and counts them in pulled.
func countedItems(pulled *atomic.Int64) iter.Seq2[string, error] {
	return func(yield func(string, error) bool) {
		for _, it := range accountList(turnItems) {
			pulled.Add(1)
			if !yield(it, nil) {
				return
			}
		}
	}
}

// ranOnce is an item function that counts its calls per item, and a check
// that each of the turnItems items ran exactly once.
func ranOnce() (func(context.Context, string) error, func(t *testing.T)) {
	var mu sync.Mutex
	ran := map[string]int{}
	fn := func(_ context.Context, it string) error {
		mu.Lock()
		ran[it]++
		mu.Unlock()
		return nil
	}
	check := func(t *testing.T) {
		t.Helper()
		mu.Lock()
		defer mu.Unlock()
		for _, it := range accountList(turnItems) {
			if ran[it] != 1 {
				t.Fatalf("%s ran %d times, want once", it, ran[it])
			}
		}
		if len(ran) != turnItems {
			t.Fatalf("%d items ran, want %d", len(ran), turnItems)
		}
	}
	return fn, check
}

// TestEachOneRecorderAtATime: while one caller (A) records a period's item
// set, another (B, a host of its own) waits for its turn and generates
// nothing; once A has sealed the set, B finds it sealed, generates
// nothing, and shares the work. No connection keeps the turn's lock
// afterwards. On a pgx pool and on database/sql with each driver.
func TestEachOneRecorderAtATime(t *testing.T) {
	t.Parallel()
	eachPool(t, func(t *testing.T, driver string) {
		p := startHolder(t, driver)
		var pulled atomic.Int64
		errB := p.runB(&pulled)
		watch := newPool(t)
		testwait.Until(t, func() bool { return advisoryLocks(t, watch, p.appB, false) == 1 },
			"B (%s) to wait for the period's turn: an advisory lock not granted", p.appB)
		if n := pulled.Load(); n != 0 {
			t.Fatalf("B generated %d items while A held the turn", n)
		}
		p.goOn()
		if err := testwait.Recv(t, p.errA, "A's Each to return"); err != nil {
			t.Fatal(err)
		}
		if err := testwait.Recv(t, errB, "B's Each to return"); err != nil {
			t.Fatal(err)
		}
		if n := pulled.Load(); n != 0 {
			t.Fatalf("B generated %d items of a set that A sealed", n)
		}
		p.check(t)
		if n := advisoryLocks(t, watch, p.appA, true) + advisoryLocks(t, watch, p.appB, true); n != 0 {
			t.Fatalf("%d advisory locks still held by the ledgers' connections", n)
		}
	})
}

// turnPair is a turn test's two callers: A, whose Each of a new period
// holds the turn, having stopped generating its items at the 601st until
// goOn is called (its error comes on errA), and B's ledger, on the same
// schema; fn and check count the items they apply.
type turnPair struct {
	appA, appB string
	a, b       turnLedger
	fn         func(context.Context, string) error
	check      func(t *testing.T)
	goOn       func()
	errA       chan error
}

// runB starts B's Each of the period over the items, counted in pulled,
// with one worker and opts; its error comes on the channel.
func (p turnPair) runB(pulled *atomic.Int64, opts ...idem.Option) <-chan error {
	errB := make(chan error, 1)
	go func() {
		_, err := idem.Each(context.Background(), p.b, points, countedItems(pulled), p.fn, append([]idem.Option{idem.WithWorkers(1)}, opts...)...)
		errB <- err
	}()
	return errB
}

// startHolder starts A (see turnPair) on a pool of driver, once it holds
// the turn; B's connections get the server settings bParams.
func startHolder(t *testing.T, driver string, bParams ...string) turnPair {
	t.Helper()
	p := turnPair{appA: uniqueName("turn_a_"), appB: uniqueName("turn_b_"), errA: make(chan error, 1)}
	p.a = openAs(t, driver, "", p.appA, 0)
	p.b = openAs(t, driver, p.a.Schema(), p.appB, 0, bParams...)
	p.fn, p.check = ranOnce()
	reached, goOn := make(chan struct{}), make(chan struct{})
	var once sync.Once
	p.goOn = func() { once.Do(func() { close(goOn) }) }
	// A test that fails before it lets A go on lets it go here, before the
	// pools close (a pool waits for A's connection, which holds the turn).
	t.Cleanup(p.goOn)
	go func() {
		_, err := idem.Each(context.Background(), p.a, points, blockingItems(reached, goOn), p.fn, idem.WithWorkers(1))
		p.errA <- err
	}()
	testwait.Recv(t, reached, "A to generate 600 items")
	return p
}

// TestEachRecorderKilledHandsOnTheTurn: a child process that holds the
// period's turn, midway through generating its items, is SIGKILLed while
// the parent waits for the turn; the parent then takes it at once (its
// lease, an hour, plays no part), records the set and applies every item
// once.
func TestEachRecorderKilledHandsOnTheTurn(t *testing.T) {
	testDSN(t)
	if idemtest.IsChild(t) {
		idemtest.Start(t, "", func(arg string) { // does not return
			schema, app, _ := strings.Cut(arg, "|")
			l := openAs(t, "", schema, app, 0)
			_, err := idem.Each(context.Background(), l, points, blockingItems(make(chan struct{}), nil),
				func(context.Context, string) error { return errors.New("the child applies nothing") })
			t.Fatalf("Each returned: %v", err)
		})
	}
	t.Parallel()
	ctx := context.Background()
	appChild, appParent := uniqueName("turn_child_"), uniqueName("turn_parent_")
	l := openAs(t, "", "", appParent, 0)
	watch := newPool(t)
	child := idemtest.Start(t, l.Schema()+"|"+appChild, nil)
	// A test that fails before the kill kills the child here, before the
	// pool closes (a pool waits for the parent's connection, which waits for
	// the child's turn).
	t.Cleanup(child.Kill)
	testwait.Until(t, func() bool { return advisoryLocks(t, watch, appChild, true) == 1 },
		"the child (%s) to hold the period's turn", appChild)
	fn, check := ranOnce()
	var pulled atomic.Int64
	errs := make(chan error, 1)
	go func() {
		_, err := idem.Each(ctx, l, points, countedItems(&pulled), fn, idem.WithWorkers(2), idem.WithLease(time.Hour))
		errs <- err
	}()
	testwait.Until(t, func() bool { return advisoryLocks(t, watch, appParent, false) == 1 },
		"the parent (%s) to wait for the period's turn", appParent)
	if n := pulled.Load(); n != 0 {
		t.Fatalf("the parent generated %d items while the child held the turn", n)
	}
	child.Kill()
	if e := child.Wait(); !e.Killed {
		t.Fatalf("child: %+v", e)
	}
	if err := testwait.Recv(t, errs, "the parent's Each to return"); err != nil {
		t.Fatal(err)
	}
	if n := pulled.Load(); n != turnItems {
		t.Fatalf("the parent generated %d items, want all %d: it recorded the set", n, turnItems)
	}
	check(t)
}

// TestEachTurnWaitEnds: a caller whose wait for the turn ends (the lease,
// its lock_timeout; or a statement_timeout of the server's, shorter than
// the lease) records the set beside its holder (which has stalled), and
// completes the period; the holder, woken, finds the set sealed and
// returns. Every item runs once.
func TestEachTurnWaitEnds(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		lease  time.Duration
		params []string // B's server settings
	}{
		{"lease", time.Second, nil},
		{"statement_timeout", time.Hour, []string{"statement_timeout=2000"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p := startHolder(t, "", tc.params...)
			var pulled atomic.Int64
			// B's wait is bounded by its lease or the server's setting; the
			// test's own deadline bounds it too, should neither end it.
			ctx, cancel := context.WithTimeout(context.Background(), testwait.Limit(t))
			defer cancel()
			res, err := idem.Each(ctx, p.b, points, countedItems(&pulled), p.fn, idem.WithLease(tc.lease))
			if err != nil || res.Outcome != idem.Ran || res.Counts.Done != turnItems {
				t.Fatalf("B, beside a stalled holder of the turn: %v, %+v", err, res)
			}
			if n := pulled.Load(); n != turnItems {
				t.Fatalf("B generated %d items, want all %d", n, turnItems)
			}
			p.goOn()
			if err := testwait.Recv(t, p.errA, "A's Each to return"); err != nil {
				t.Fatal(err)
			}
			p.check(t)
		})
	}
}

// TestEachTurnConnectionBroken: the server session that holds a period's
// turn is terminated (pg_terminate_backend) while its Each (A) generates
// the items, A's process alive: the caller waiting for the turn (B, whose
// lease is an hour) takes it at once, records the set and completes the
// period. A, woken, returns, without applying any item a second time;
// afterwards no connection of either pool holds the lock, and A's ledger
// works on (its pool dropped the broken connection).
func TestEachTurnConnectionBroken(t *testing.T) {
	t.Parallel()
	eachPool(t, func(t *testing.T, driver string) {
		ctx := context.Background()
		p := startHolder(t, driver)
		var pulled atomic.Int64
		errB := p.runB(&pulled, idem.WithLease(time.Hour))
		watch := newPool(t)
		testwait.Until(t, func() bool { return advisoryLocks(t, watch, p.appB, false) == 1 },
			"B (%s) to wait for the period's turn", p.appB)
		var ended int
		if err := watch.QueryRow(ctx, `SELECT count(pg_terminate_backend(l.pid)) FROM pg_locks AS l
			JOIN pg_stat_activity AS a ON a.pid = l.pid
			WHERE l.locktype = 'advisory' AND l.granted AND a.application_name = $1`, p.appA).Scan(&ended); err != nil || ended != 1 {
			t.Fatalf("terminated %d sessions of A holding an advisory lock, %v; want 1", ended, err)
		}
		if err := testwait.Recv(t, errB, "B's Each to return once A's session ended"); err != nil {
			t.Fatal(err)
		}
		if n := pulled.Load(); n != turnItems {
			t.Fatalf("B generated %d items, want all %d: it recorded the set", n, turnItems)
		}
		p.goOn()
		t.Logf("A, whose connection broke: %v", testwait.Recv(t, p.errA, "A's Each to return"))
		p.check(t)
		if n := advisoryLocks(t, watch, p.appA, true) + advisoryLocks(t, watch, p.appB, true); n != 0 {
			t.Fatalf("%d advisory locks still held by the ledgers' connections", n)
		}
		if rec, ok, err := p.a.Lookup(ctx, points); err != nil || !ok || rec.Status != idem.StatusDone {
			t.Fatalf("A's ledger after its broken connection: %+v, %v, %v; want the period done", rec, ok, err)
		}
	})
}

// TestEachTurnOnAPoolOfOne: the turn records on the connection that holds
// it, so two Each calls at once on a ledger whose pool has one connection
// both complete.
func TestEachTurnOnAPoolOfOne(t *testing.T) {
	t.Parallel()
	eachPool(t, func(t *testing.T, driver string) {
		l := openAs(t, driver, "", uniqueName("turn_one_"), 1)
		fn, check := ranOnce()
		errs := make(chan error, 2)
		for range 2 {
			go func() {
				_, err := idem.Each(context.Background(), l, points, accounts(turnItems), fn, idem.WithWorkers(2))
				errs <- err
			}()
		}
		for range 2 {
			if err := testwait.Recv(t, errs, "an Each on a pool of one connection to return"); err != nil {
				t.Fatal(err)
			}
		}
		check(t)
	})
}

// sqlLog records the statements that a pool's connections send.
type sqlLog struct {
	mu  sync.Mutex
	sql []string
}

func (s *sqlLog) add(q string) {
	s.mu.Lock()
	s.sql = append(s.sql, q)
	s.mu.Unlock()
}

func (s *sqlLog) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	s.add(d.SQL)
	return ctx
}
func (*sqlLog) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
func (*sqlLog) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return ctx
}
func (s *sqlLog) TraceBatchQuery(_ context.Context, _ *pgx.Conn, d pgx.TraceBatchQueryData) {
	s.add(d.SQL)
}
func (*sqlLog) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

// since returns how many statements sent since mark (a length of the log)
// hold part.
func (s *sqlLog) since(mark int, part string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, q := range s.sql[mark:] {
		if strings.Contains(q, part) {
			n++
		}
	}
	return n
}

// loggedPool opens a pgx pool on dsn whose statements the returned log
// records, closed when t ends.
func loggedPool(t testing.TB, dsn string) (*pgxpool.Pool, *sqlLog) {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	log := &sqlLog{}
	cfg.ConnConfig.Tracer = log
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool, log
}

// exactly returns how many statements sent since mark are q.
func (s *sqlLog) exactly(mark int, q string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, sent := range s.sql[mark:] {
		if sent == q {
			n++
		}
	}
	return n
}

func (s *sqlLog) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.sql)
}

// TestTurnSealChecksWhatItCannotProve: a turn that made every chunk of its
// period, each item in one of them once (by the items' hashes), seals
// without reading the items; a turn given an item twice, or that finds a
// chunk another caller made, seals with the check, which removes the later
// occurrences. Either way each item of the set is claimed once. Each case
// twice: the turn's chunks given to RecordItems, and given to Seal as its
// last (on a pgx pool, sent in the seal's round trip when the turn found
// the period empty).
func TestTurnSealChecksWhatItCannotProve(t *testing.T) {
	t.Parallel()
	const check = "HAVING count(*) > 1" // of the seal's check (sealItemsSQL) alone
	for _, tc := range []struct {
		name    string
		before  [][]string // recorded first by a caller without the turn
		turn    [][]string // recorded in the turn
		want    []string   // the set, each item once
		checked bool       // the seal reads the items
	}{
		{"distinct", nil, [][]string{{"a", "b"}, {"c", "d"}}, []string{"a", "b", "c", "d"}, false},
		{"an item twice", nil, [][]string{{"a", "b", "c"}, {"c", "d"}}, []string{"a", "b", "c", "d"}, true},
		{"another's chunk", [][]string{{"x", "y"}}, [][]string{{"y", "z"}}, []string{"x", "y", "z"}, true},
	} {
		for _, last := range []bool{false, true} {
			name := tc.name
			if last {
				name += "/last"
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				ctx := context.Background()
				pool, log := loggedPool(t, testDSN(t))
				l := openLedger(t, pool)
				if tc.before != nil {
					if err := l.RecordItems(ctx, points, tc.before); err != nil {
						t.Fatal(err)
					}
				}
				mark := log.len()
				turn, err := l.RecordTurn(ctx, points, time.Minute)
				if err != nil || turn.Sealed() {
					t.Fatalf("RecordTurn: %v, sealed %v", err, turn != nil && turn.Sealed())
				}
				var rest [][]string
				if last {
					rest = tc.turn
				} else if err := turn.RecordItems(ctx, tc.turn); err != nil {
					t.Fatal(err)
				}
				if err := turn.Seal(ctx, rest); err != nil {
					t.Fatal(err)
				}
				turn.Release()
				if got := log.since(mark, check) > 0; got != tc.checked {
					t.Fatalf("the seal read the items: %v, want %v", got, tc.checked)
				}
				checkCounts(t, l, idem.ItemCounts{Sealed: true, Pending: int64(len(tc.want))})
				var claimed []string
				for {
					b := claimer(t, l, "w", idem.DefaultLease)(100, false)
					if b.Chunk == 0 && len(b.Items) == 0 {
						break
					}
					claimed = append(claimed, claimedItems(b)...)
				}
				slices.Sort(claimed)
				if !slices.Equal(claimed, tc.want) {
					t.Fatalf("claimed %v, want %v", claimed, tc.want)
				}
			})
		}
	}
}

// TestTurnFindsSetSealed: a turn that seals a set without the check gives
// its lock back in the seal's round trip; a turn taken once the set is
// sealed gives its lock back in the round trip that took it: Sealed, no
// lock held by the caller's connections before Release, and no unlock sent
// on its own.
func TestTurnFindsSetSealed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, log := loggedPool(t, withApp(t, "turn-sealed"))
	l := openLedger(t, pool)
	first, err := l.RecordTurn(ctx, points, time.Minute)
	if err != nil || first.Sealed() {
		t.Fatalf("first RecordTurn: %v, sealed %v", err, first != nil && first.Sealed())
	}
	if err := first.RecordItems(ctx, [][]string{{"a", "b"}}); err != nil {
		t.Fatal(err)
	}
	// The seal without the check gives the turn back in its own round trip
	// (on a pgx pool): no lock is held after it, and no unlock is sent alone.
	if err := first.Seal(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if n := advisoryLocks(t, newPool(t), "turn-sealed", true); n != 0 {
		t.Fatalf("the caller's connections hold %d advisory locks after the seal, want 0", n)
	}
	first.Release()
	if n := log.exactly(0, "SELECT pg_advisory_unlock($1)"); n != 0 {
		t.Fatalf("the first turn sent %d unlocks on their own, want 0", n)
	}
	checkCounts(t, l, idem.ItemCounts{Sealed: true, Pending: 2})
	mark, conns := log.len(), pool.Stat().TotalConns()
	turn, err := l.RecordTurn(ctx, points, time.Minute)
	if err != nil || !turn.Sealed() {
		t.Fatalf("RecordTurn of a sealed set: %v, sealed %v; want sealed", err, turn != nil && turn.Sealed())
	}
	if n := advisoryLocks(t, newPool(t), "turn-sealed", true); n != 0 {
		t.Fatalf("the caller's connections hold %d advisory locks before Release, want 0", n)
	}
	turn.Release()
	if n := log.exactly(mark, "SELECT pg_advisory_unlock($1)"); n != 0 {
		t.Fatalf("%d unlocks sent on their own, want 0", n)
	}
	if n := pool.Stat().TotalConns(); n != conns {
		t.Fatalf("the pool has %d connections, had %d: the turn's was closed, not given back", n, conns)
	}
	if err := turn.Seal(ctx, nil); err != nil { // a sealed set's turn: the set's own SealItems
		t.Fatalf("Seal of a turn that found the set sealed: %v", err)
	}
}
