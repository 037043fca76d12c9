package mysqlledger_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"iter"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemtest"
	"github.com/idemgo/idem/internal/testwait"
	"github.com/idemgo/idem/mysqlledger"
)

// The turn to record a period's item set (RecordTurn): one caller at a
// time generates and records the set; the others wait for it, find the set
// sealed and generate nothing.

// turnItems is the size of the item set in these tests.
const turnItems = 1200

var turnKey = idem.Key{Job: "fan", Period: "2026-12-05"}

func turnList() []string {
	ids := make([]string, turnItems)
	for i := range ids {
		ids[i] = fmt.Sprintf("acct-%05d", i)
	}
	return ids
}

// openInterpolated opens the test database with interpolateParams=true,
// so that the server's process list shows each statement's arguments.
func openInterpolated(t testing.TB) *sql.DB {
	t.Helper()
	return openDBWith(t, func(c *mysql.Config) { c.InterpolateParams = true })
}

// turnWaiters counts the connections that wait for the named lock name
// (GET_LOCK, its name among the statement's arguments).
func turnWaiters(t testing.TB, db *sql.DB, name string) int {
	t.Helper()
	var n int
	if err := db.QueryRow(`SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE INFO LIKE ?`,
		"SELECT GET_LOCK('"+name+"'%").Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// turnHolder reports whether a connection holds the named lock name.
func turnHolder(t testing.TB, db *sql.DB, name string) bool {
	t.Helper()
	var id sql.NullInt64
	if err := db.QueryRow(`SELECT IS_USED_LOCK(?)`, name).Scan(&id); err != nil {
		t.Fatal(err)
	}
	return id.Valid
}

// blockingItems generates the turnItems items and stops before the 601st:
// it closes reached, then waits for goOn (forever if nil).
func blockingItems(reached chan<- struct{}, goOn <-chan struct{}) iter.Seq2[string, error] {
	return func(yield func(string, error) bool) {
		for i, it := range turnList() {
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
		for _, it := range turnList() {
			pulled.Add(1)
			if !yield(it, nil) {
				return
			}
		}
	}
}

// ranOnce is an item function that counts its calls per item, and a check
// that each item of want ran exactly once.
func ranOnce() (func(context.Context, string) error, func(t *testing.T, want []string)) {
	var mu sync.Mutex
	ran := map[string]int{}
	fn := func(_ context.Context, it string) error {
		mu.Lock()
		ran[it]++
		mu.Unlock()
		return nil
	}
	check := func(t *testing.T, want []string) {
		t.Helper()
		mu.Lock()
		defer mu.Unlock()
		for _, it := range want {
			if ran[it] != 1 {
				t.Fatalf("%s ran %d times, want once", it, ran[it])
			}
		}
		if len(ran) != len(want) {
			t.Fatalf("%d items ran, want %d", len(ran), len(want))
		}
	}
	return fn, check
}

// turnPair is a turn test's two callers on one ledger's tables, each on a
// *sql.DB of its own: A, whose Each of turnKey holds the turn, stopped
// generating its items at the 601st until goOn is called (its error comes
// on errA), and B's ledger.
type turnPair struct {
	a, b  *mysqlledger.Ledger
	name  string // the turn's lock
	watch *sql.DB
	fn    func(context.Context, string) error
	check func(t *testing.T, want []string)
	goOn  func()
	errA  chan error
}

func startHolder(t *testing.T) turnPair {
	t.Helper()
	p := turnPair{errA: make(chan error, 1), watch: openDB(t)}
	p.a = openLedger(t, openInterpolated(t))
	var err error
	if p.b, err = mysqlledger.New(context.Background(), openInterpolated(t), mysqlledger.WithTablePrefix(p.a.Prefix())); err != nil {
		t.Fatal(err)
	}
	if p.name, err = p.a.TurnName(context.Background(), turnKey); err != nil {
		t.Fatal(err)
	}
	p.fn, p.check = ranOnce()
	reached, goOn := make(chan struct{}), make(chan struct{})
	var once sync.Once
	p.goOn = func() { once.Do(func() { close(goOn) }) }
	t.Cleanup(p.goOn) // a test that fails before it lets A go on lets it go here
	go func() {
		_, err := idem.Each(context.Background(), p.a, turnKey, blockingItems(reached, goOn), p.fn, idem.WithWorkers(1))
		p.errA <- err
	}()
	testwait.Recv(t, reached, "A to generate 600 items")
	if !turnHolder(t, p.watch, p.name) {
		t.Fatal("A generates its items, and nobody holds the period's turn")
	}
	return p
}

// runB starts B's Each of turnKey over the items, counted in pulled; its
// error comes on the channel.
func (p turnPair) runB(pulled *atomic.Int64, opts ...idem.Option) <-chan error {
	errB := make(chan error, 1)
	go func() {
		_, err := idem.Each(context.Background(), p.b, turnKey, countedItems(pulled), p.fn, append([]idem.Option{idem.WithWorkers(1)}, opts...)...)
		errB <- err
	}()
	return errB
}

// TestEachOneRecorderAtATime: while one caller (A) records a period's item
// set, another (B, with a *sql.DB of its own) waits for its turn and
// generates nothing; once A has sealed the set, B finds it sealed,
// generates nothing, and shares the work: every item runs once. No
// connection keeps the turn's lock afterwards.
func TestEachOneRecorderAtATime(t *testing.T) {
	t.Parallel()
	p := startHolder(t)
	var pulled atomic.Int64
	errB := p.runB(&pulled)
	testwait.Until(t, func() bool { return turnWaiters(t, p.watch, p.name) == 1 }, "B to wait for the period's turn")
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
	p.check(t, turnList())
	if turnHolder(t, p.watch, p.name) {
		t.Fatal("a connection still holds the period's turn")
	}
}

// TestEachTurnWaitEnds: a caller (B) whose wait for the turn ends (its
// lease, 2 s) records the set beside its holder (A, which has stalled),
// and completes the period; A, woken, finds the set sealed and returns.
// Every item runs once.
func TestEachTurnWaitEnds(t *testing.T) {
	t.Parallel()
	p := startHolder(t)
	var pulled atomic.Int64
	errB := p.runB(&pulled, idem.WithLease(2*time.Second))
	if err := testwait.Recv(t, errB, "B's Each to return"); err != nil {
		t.Fatal(err)
	}
	if n := pulled.Load(); n != turnItems {
		t.Fatalf("B generated %d items, want all %d", n, turnItems)
	}
	p.goOn()
	if err := testwait.Recv(t, p.errA, "A's Each to return"); err != nil {
		t.Fatal(err)
	}
	p.check(t, turnList())
}

// TestTurnSealChecksWhatOthersAdded: a turn that found the period empty
// keeps its chunks in memory and writes them, with no row per item in
// item_set, only if the period is still empty at its Seal. Items that
// another caller added meanwhile (AddItems while the turn's holder
// generates: a caller without the turn) are then not recorded twice: the
// set holds each item once, and each runs once.
func TestTurnSealChecksWhatOthersAdded(t *testing.T) {
	t.Parallel()
	p := startHolder(t)
	ctx := context.Background()
	list := turnList()
	// Items A generated already, items it has yet to, and one of B's own.
	extra := append(append([]string{}, list[10:20]...), list[900:910]...)
	extra = append(extra, "acct-b-only")
	if err := p.b.AddItems(ctx, turnKey, extra); err != nil {
		t.Fatal(err)
	}
	p.goOn()
	if err := testwait.Recv(t, p.errA, "A's Each to return"); err != nil {
		t.Fatal(err)
	}
	c, err := p.a.CountItems(ctx, turnKey)
	if err != nil {
		t.Fatal(err)
	}
	want := append(list, "acct-b-only")
	if c.Total() != int64(len(want)) || c.Done != int64(len(want)) {
		t.Fatalf("counts %+v; want %d items, each once, done", c, len(want))
	}
	p.check(t, want)
}

// TestEachRecorderKilledHandsOnTheTurn: a child process that holds the
// period's turn, midway through generating its items, is SIGKILLed while
// the parent waits for the turn; the parent then takes it at once (its
// lease, an hour, plays no part), records the set and applies every item
// once. Nothing of the child's set was kept.
func TestEachRecorderKilledHandsOnTheTurn(t *testing.T) {
	testDSN(t)
	if idemtest.IsChild(t) {
		idemtest.Start(t, "", func(prefix string) { // does not return
			l, err := mysqlledger.New(context.Background(), openInterpolated(t), mysqlledger.WithTablePrefix(prefix))
			if err != nil {
				t.Fatal(err)
			}
			_, err = idem.Each(context.Background(), l, turnKey, blockingItems(make(chan struct{}), nil),
				func(context.Context, string) error { return errors.New("the child applies nothing") })
			t.Fatalf("Each returned: %v", err)
		})
	}
	t.Parallel()
	ctx := context.Background()
	watch := openDB(t)
	l := openLedger(t, openInterpolated(t))
	name, err := l.TurnName(ctx, turnKey)
	if err != nil {
		t.Fatal(err)
	}
	child := idemtest.Start(t, l.Prefix(), nil)
	t.Cleanup(child.Kill)
	testwait.Until(t, func() bool { return turnHolder(t, watch, name) }, "the child to hold the period's turn")
	fn, check := ranOnce()
	var pulled atomic.Int64
	errs := make(chan error, 1)
	go func() {
		_, err := idem.Each(ctx, l, turnKey, countedItems(&pulled), fn, idem.WithWorkers(2), idem.WithLease(time.Hour))
		errs <- err
	}()
	testwait.Until(t, func() bool { return turnWaiters(t, watch, name) == 1 }, "the parent to wait for the period's turn")
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
	check(t, turnList())
}

// TestTurnWaitEndsNotHeld: RecordTurn's wait is bounded: while another
// caller holds the turn, a RecordTurn with a wait of one second returns a
// turn that is not held and records as RecordItems does; a turn released
// without its Seal leaves nothing of what it held in memory, and the next
// turn records the set.
func TestTurnWaitEndsNotHeld(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a := openLedger(t, openDB(t))
	b, err := mysqlledger.New(ctx, openDB(t), mysqlledger.WithTablePrefix(a.Prefix()))
	if err != nil {
		t.Fatal(err)
	}
	held, err := a.RecordTurn(ctx, turnKey, time.Minute)
	if err != nil || held.Sealed() {
		t.Fatalf("first turn: sealed %v, %v", held != nil && held.Sealed(), err)
	}
	if err := held.RecordItems(ctx, [][]string{{"x1", "x2"}}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	other, err := b.RecordTurn(ctx, turnKey, time.Second)
	if err != nil || other.Sealed() {
		t.Fatalf("second turn: %v", err)
	}
	if time.Since(start) < 900*time.Millisecond {
		t.Fatalf("the second RecordTurn returned after %v while the first held the turn", time.Since(start))
	}
	if err := other.RecordItems(ctx, [][]string{{"y1"}}); err != nil {
		t.Fatal(err)
	}
	other.Release()
	held.Release() // nothing of x1, x2 is kept: they were held in memory
	c, err := a.CountItems(ctx, turnKey)
	if err != nil || c.Total() != 1 || c.Sealed {
		t.Fatalf("counts %+v, %v; want y1 alone, not sealed", c, err)
	}
	next, err := a.RecordTurn(ctx, turnKey, time.Minute)
	if err != nil || next.Sealed() {
		t.Fatalf("third turn: %v", err)
	}
	if err := next.Seal(ctx, [][]string{{"y1", "z1"}}); err != nil {
		t.Fatal(err)
	}
	next.Release()
	if c, err = a.CountItems(ctx, turnKey); err != nil || c.Total() != 2 || !c.Sealed {
		t.Fatalf("counts %+v, %v; want y1 and z1, sealed", c, err)
	}
	last, err := b.RecordTurn(ctx, turnKey, time.Minute)
	if err != nil || !last.Sealed() {
		t.Fatalf("a turn after the seal: sealed %v, %v; want sealed", last != nil && last.Sealed(), err)
	}
	last.Release()
}

// TestEachOnOneConnection: a ledger on a pool of a single connection runs
// Each: the turn records and seals the set on the connection that holds
// it, and gives it back before the workers claim.
func TestEachOnOneConnection(t *testing.T) {
	t.Parallel()
	db := openDB(t)
	l := openLedger(t, db)
	db.SetMaxOpenConns(1)
	fn, check := ranOnce()
	ctx, cancel := context.WithTimeout(context.Background(), testwait.Limit(t))
	defer cancel()
	var pulled atomic.Int64
	if _, err := idem.Each(ctx, l, turnKey, countedItems(&pulled), fn, idem.WithWorkers(1)); err != nil {
		t.Fatal(err)
	}
	check(t, turnList())
}
