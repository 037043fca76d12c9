package idem_test

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"testing"

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
// (the queue's order lets each other process commit once, or twice when
// the waiting process was descheduled between its writes). With SQLite's
// busy handler alone (sleep and try again) a process keeps missing the
// short gaps between another process's commits, and waits behind dozens
// of them or hundreds.
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
		cmds  []*exec.Cmd
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
		cmds, outs, start = append(cmds, cmd), append(outs, out), append(start, startW)
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
	const fairBound = 2 * (fairWriters - 1)
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
