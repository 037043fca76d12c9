package idem_test

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/internal/testwait"
)

// envFairWriter, set to "<ledger path>,<writer number>", makes the test
// binary a writer process of TestLedgerWritersServedInOrder.
const envFairWriter = "IDEM_TEST_FAIR_WRITER"

const (
	fairWriters = 4   // processes writing to one ledger
	fairWrites  = 150 // RunTxs of each, on two goroutines
)

// TestLedgerWritersServedInOrder: four processes run RunTx on one ledger as
// fast as they can (two goroutines each, a fresh key each time, fn writing
// a row of its process in the transaction, so that the rows' order is the
// commits' order). While every process still writes, none waits behind
// many commits of the others: between two commits of a process come at
// most fairBound commits of the others in at least 9 of 10 of its waits
// (the queue lets each other process ahead of it commit one turn's
// writes, LedgerQueueBatch at most; two turns when the waiting process was
// descheduled between its writes). With SQLite's busy handler alone
// (sleep and try again) a process keeps missing the short gaps between
// another process's commits, and waits behind dozens of them or hundreds.
func TestLedgerWritersServedInOrder(t *testing.T) {
	if arg := os.Getenv(envFairWriter); arg != "" {
		fairWriter(t, arg)
		return
	}
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "ledger.db")
	l, err := idem.OpenLedger(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.DB().Exec(`CREATE TABLE fair_log(seq INTEGER PRIMARY KEY AUTOINCREMENT, proc INTEGER NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	var (
		outs  []*bytes.Buffer
		start []*os.File
		ready = make(chan int, fairWriters)
		wg    sync.WaitGroup
		errs  = make([]error, fairWriters)
	)
	for i := range fairWriters {
		cmd := exec.Command(os.Args[0], "-test.run=^TestLedgerWritersServedInOrder$", "-test.count=1", "-test.v")
		cmd.Env = append(os.Environ(), envFairWriter+"="+path+","+strconv.Itoa(i))
		out := new(bytes.Buffer)
		cmd.Stdout, cmd.Stderr = out, out
		startR, startW, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		readyR, readyW, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stdin, cmd.ExtraFiles = startR, []*os.File{readyW}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		startR.Close()
		readyW.Close()
		outs, start = append(outs, out), append(start, startW)
		go func() { // a byte once it opened the ledger; EOF if it exits first
			var b [1]byte
			readyR.Read(b[:])
			readyR.Close()
			ready <- i
		}()
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = testwait.Process(cmd, testwait.Limit(t))
		}()
	}
	for range fairWriters {
		testwait.Recv(t, ready, "the writers to open the ledger")
	}
	for _, w := range start { // all at once: each writer starts when its stdin closes
		w.Close()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("writer %d: %v\n%s", i, err, outs[i])
		}
	}

	rows, err := l.DB().Query(`SELECT proc FROM fair_log ORDER BY seq`)
	if err != nil {
		t.Fatal(err)
	}
	var order []int
	for rows.Next() {
		var p int
		if err := rows.Scan(&p); err != nil {
			t.Fatal(err)
		}
		order = append(order, p)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	l.Close()
	if len(order) != fairWriters*fairWrites {
		t.Fatalf("%d commits logged, want %d", len(order), fairWriters*fairWrites)
	}
	// The window where every process still writes: up to the first
	// process's last commit.
	seen := make([]int, fairWriters)
	end := len(order)
	for i, p := range order {
		if seen[p]++; seen[p] == fairWrites {
			end = i
			break
		}
	}
	const fairBound = idem.LedgerQueueBatch * (fairWriters - 1)
	for p := range fairWriters {
		var gaps []int // others' commits between two of p's
		last := -1
		for i, q := range order[:end+1] {
			if q != p {
				continue
			}
			if last >= 0 {
				gaps = append(gaps, i-last-1)
			}
			last = i
		}
		// Others' commits after p's last commit in the window: p waits
		// behind them too.
		if last >= 0 && end > last {
			gaps = append(gaps, end-last)
		} else if last < 0 {
			gaps = append(gaps, end+1)
		}
		slices.Sort(gaps)
		over := 0
		for _, g := range gaps {
			if g > fairBound {
				over++
			}
		}
		t.Logf("writer %d: %d commits of %d in the window; others' commits between two of its: median %d, 90th percentile %d, max %d; %d waits behind more than %d",
			p, seen[p], end+1, gaps[len(gaps)/2], gaps[len(gaps)*9/10], gaps[len(gaps)-1], over, fairBound)
		if over*10 > len(gaps) {
			t.Errorf("writer %d waited behind more than %d commits of the others in %d of its %d waits (more than 1 in 10): writers are not served in order",
				p, fairBound, over, len(gaps))
		}
	}
}

// fairWriter is a writer process of TestLedgerWritersServedInOrder: once
// its stdin is closed, it runs fairWrites RunTxs on two goroutines.
func fairWriter(t *testing.T, arg string) {
	i := bytes.LastIndexByte([]byte(arg), ',')
	path, proc := arg[:i], arg[i+1:]
	l, err := idem.OpenLedger(path, idem.WithLockWait(testwait.Limit(t)))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ready := os.NewFile(3, "ready")
	ready.Write([]byte{1})
	ready.Close()
	bufio.NewReader(os.Stdin).ReadByte() // the start: EOF
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	for g := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := g; n < fairWrites; n += 2 {
				key := idem.Key{Job: "fair-" + proc, Period: fmt.Sprintf("%04d", n)}
				err := l.RunTx(ctx, key, func(ctx context.Context, tx *sql.Tx) error {
					_, err := tx.ExecContext(ctx, `INSERT INTO fair_log(proc) VALUES (?)`, proc)
					return err
				})
				if err != nil {
					errs <- fmt.Errorf("RunTx(%s): %w", key, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// queueTaken reads how many numbers the write queue of the ledger at path
// has given out (the counter at the start of <path>-lock).
func queueTaken(t *testing.T, path string) uint64 {
	t.Helper()
	b, err := os.ReadFile(path + "-lock")
	if err != nil || len(b) < 8 {
		return 0
	}
	return binary.LittleEndian.Uint64(b)
}

// holdTurn runs a RunTx on l whose fn blocks until the returned release is
// called (also when t ends): it holds l's turn in the write queue.
func holdTurn(t *testing.T, l *idem.Ledger, key idem.Key) (release func(), done <-chan error) {
	t.Helper()
	in, free := make(chan struct{}), make(chan struct{})
	var once sync.Once
	release = func() { once.Do(func() { close(free) }) }
	t.Cleanup(release)
	ch := make(chan error, 1)
	go func() {
		ch <- l.RunTx(context.Background(), key, func(context.Context, *sql.Tx) error {
			close(in)
			<-free
			return nil
		})
	}()
	testwait.Recv(t, in, "the RunTx's fn to hold the turn")
	return release, ch
}

// TestLedgerQueueWaitBounded: a write queued behind another handle's turn
// (a RunTx whose fn runs) waits at most WithLockWait, then fails with an
// error matching ErrWriteLockHeld that names the ledger, having written
// nothing; a cancelled context ends its wait too. The number it gave up
// holds nobody up: a third handle's write, queued after it, runs once the
// turn is given back (with the number of that handle's own write whose
// context was cancelled), and so does the same handle's next write.
func TestLedgerQueueWaitBounded(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "ledger.db")
	a := openLedger(t, dir)
	b := openLedger(t, dir, idem.WithLockWait(100*time.Millisecond))
	c := openLedger(t, dir, idem.WithLockWait(time.Hour))
	release, held := holdTurn(t, a, idem.Key{Job: "queue", Period: "held"})

	key := idem.Key{Job: "queue", Period: "bounded"}
	ran := false
	errCh := make(chan error, 1)
	go func() {
		errCh <- b.Run(context.Background(), key, func(context.Context) error { ran = true; return nil })
	}()
	err := testwait.Recv(t, errCh, "a write queued behind another handle's turn to give up after WithLockWait")
	if !errors.Is(err, idem.ErrWriteLockHeld) || !strings.Contains(err.Error(), path) {
		t.Errorf("Run queued behind another handle's turn = %v, want an error matching ErrWriteLockHeld naming %s", err, path)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		errCh <- c.Run(ctx, idem.Key{Job: "queue", Period: "cancelled"}, func(context.Context) error { ran = true; return nil })
	}()
	// a's RunTx went ahead of the empty queue without a number; c's claim
	// finds SQLite's lock held, takes a number, gets its turn and waits
	// for that lock.
	testwait.Until(t, func() bool { return idem.LedgerLockBlocked(c) > 0 }, "the cancelled write to wait for the write lock")
	cancel()
	if err := testwait.Recv(t, errCh, "a queued write to end with its context"); !errors.Is(err, context.Canceled) {
		t.Errorf("Run queued behind another handle's turn, its context cancelled = %v, want context.Canceled", err)
	}
	if ran {
		t.Error("fn ran though its claim never had the turn")
	}
	if rec, ok, err := a.Lookup(context.Background(), key); err != nil || ok {
		t.Errorf("after the failed claim: Lookup = %+v, %v, %v; want no record", rec, ok, err)
	}

	// c's next write: it waits on with the number c's cancelled write
	// took, behind the one b gave up.
	next := make(chan error, 1)
	go func() {
		next <- c.Run(context.Background(), idem.Key{Job: "queue", Period: "after"}, func(context.Context) error { return nil })
	}()
	release()
	if err := testwait.Recv(t, held, "the turn's RunTx to end"); err != nil {
		t.Fatal(err)
	}
	if err := testwait.Recv(t, next, "a write queued behind given-up numbers to run once the turn is free"); err != nil {
		t.Errorf("c's write after the turn was given back: %v", err)
	}
	if err := b.Run(context.Background(), key, func(context.Context) error { return nil }); err != nil {
		t.Errorf("b's next write: %v", err)
	}
}

// envQueueHolder, set to a ledger path, makes the test binary a process of
// TestLedgerQueueHolderKilled: it holds the turn in a RunTx's fn (after
// writing a row of its own in the transaction), says so on its stdout and
// waits to be killed.
const envQueueHolder = "IDEM_TEST_QUEUE_HOLDER"

// TestLedgerQueueHolderKilled: a process SIGKILLed while it holds the
// ledger's turn in the write queue (in a RunTx's fn), and one killed while
// it waits in the queue, hold nobody up: the kernel drops their locks, and
// the write queued behind them runs (WithLockWait is an hour: a write that
// waited for a dead process fails the test at testwait's limit). The
// killed transaction wrote nothing.
func TestLedgerQueueHolderKilled(t *testing.T) {
	if path := os.Getenv(envQueueHolder); path != "" {
		queueHolder(t, path)
		return
	}
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "ledger.db")
	l := openLedger(t, dir, idem.WithLockWait(time.Hour))
	if _, err := l.DB().Exec(`CREATE TABLE holder(n INTEGER)`); err != nil {
		t.Fatal(err)
	}
	child := func(what string) (*exec.Cmd, *bytes.Buffer) {
		cmd := exec.Command(os.Args[0], "-test.run=^TestLedgerQueueHolderKilled$", "-test.count=1", "-test.v")
		cmd.Env = append(os.Environ(), envQueueHolder+"="+path)
		out := new(bytes.Buffer)
		cmd.Stderr = out
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		in := make(chan struct{})
		go func() {
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				if sc.Text() == "holding" {
					close(in)
				}
			}
		}()
		if what == "holding" {
			testwait.Recv(t, in, "the child to hold the turn")
		}
		return cmd, out
	}

	// One child holds the turn; this process queues behind it.
	holder, _ := child("holding")
	done := make(chan error, 1)
	go func() {
		done <- l.Run(context.Background(), idem.Key{Job: "killed", Period: "1"}, func(context.Context) error { return nil })
	}()
	testwait.Until(t, func() bool { return idem.LedgerLockBlocked(l) > 0 }, "this process's write to wait behind the child")
	holder.Process.Kill()
	if err := testwait.Recv(t, done, "the write queued behind a killed holder to run"); err != nil {
		t.Fatalf("Run queued behind a killed holder: %v", err)
	}

	// This process holds the turn; a child queues behind it and is killed
	// there; a write of another handle queued after the child runs once
	// the turn is given back.
	release, held := holdTurn(t, l, idem.Key{Job: "killed", Period: "2"})
	n := queueTaken(t, path)
	waiter, _ := child("waiting")
	testwait.Until(t, func() bool { return queueTaken(t, path) > n }, "the child to queue")
	other := openLedger(t, dir, idem.WithLockWait(time.Hour))
	go func() {
		done <- other.Run(context.Background(), idem.Key{Job: "killed", Period: "3"}, func(context.Context) error { return nil })
	}()
	testwait.Until(t, func() bool { return queueTaken(t, path) > n+1 }, "another handle's write to queue behind the child")
	waiter.Process.Kill()
	waiter.Wait()
	release()
	if err := testwait.Recv(t, held, "the turn's RunTx to end"); err != nil {
		t.Fatal(err)
	}
	if err := testwait.Recv(t, done, "the write queued behind a killed waiter to run"); err != nil {
		t.Fatalf("Run queued behind a killed waiter: %v", err)
	}
	var rows int
	if err := l.DB().QueryRow(`SELECT count(*) FROM holder`).Scan(&rows); err != nil || rows != 0 {
		t.Errorf("the killed holder's transaction left %d rows (%v), want none", rows, err)
	}
}

// queueHolder is the child of TestLedgerQueueHolderKilled.
func queueHolder(t *testing.T, path string) {
	l, err := idem.OpenLedger(path, idem.WithLockWait(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	err = l.RunTx(context.Background(), idem.Key{Job: "holder", Period: strconv.Itoa(os.Getpid())}, func(ctx context.Context, tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `INSERT INTO holder VALUES (1)`); err != nil {
			return err
		}
		fmt.Println("holding")
		select {} // until killed
	})
	t.Fatal(err)
}

// TestLedgerQueueLockFileRemoved: a lock file removed while Ledgers have it
// open is not a queue of its own: the next write of each handle opens the
// file now at the path (the first creates it) and takes its number there,
// behind the writes queued in it.
func TestLedgerQueueLockFileRemoved(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "ledger.db")
	a := openLedger(t, dir)
	b := openLedger(t, dir, idem.WithLockWait(time.Hour))
	if err := os.Remove(path + "-lock"); err != nil {
		t.Fatal(err)
	}
	release, held := holdTurn(t, a, idem.Key{Job: "removed", Period: "a"})
	if n := queueTaken(t, path); n != 1 {
		t.Fatalf("after a's write the lock file at the path gave out %d numbers, want 1 (a's, on a new file)", n)
	}
	done := make(chan error, 1)
	go func() {
		done <- b.Run(context.Background(), idem.Key{Job: "removed", Period: "b"}, func(context.Context) error { return nil })
	}()
	testwait.Until(t, func() bool { return queueTaken(t, path) >= 2 }, "b's write to take its number in the lock file now at the path")
	release()
	if err := testwait.Recv(t, held, "a's RunTx to end"); err != nil {
		t.Fatal(err)
	}
	if err := testwait.Recv(t, done, "b's write to run once a's turn ended"); err != nil {
		t.Fatal(err)
	}
}
