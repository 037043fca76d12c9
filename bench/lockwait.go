package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemstore"
	"github.com/idemgo/idem/outbox"
)

// lockWaitWriters is how many processes write to one ledger file in
// sqlite_write_lock_wait.
const lockWaitWriters = 8

// lockWaitChildEnv, set to a ledger path, makes this binary a writer
// process of sqlite_write_lock_wait.
const lockWaitChildEnv = "IDEM_BENCH_LOCKWAIT_LEDGER"

// sqliteWriteLockWait starts lockWaitWriters processes (this binary,
// re-executed) on one ledger file, each running cfg.n fresh Runs on two
// goroutines (a claim and a synced done mark each: two write transactions)
// while a relay in it polls an empty outbox every 2 ms, as the torture's
// workers do. Every write reports how long it waited for the write lock
// (queued in its process and at SQLite) through idemstore.Trace; the line
// gives the p50, p99 and max over all of them.
func sqliteWriteLockWait(ctx context.Context, cfg config) (result, error) {
	dir, cleanup, err := tempDir("lockwait")
	if err != nil {
		return result{}, err
	}
	defer cleanup()
	path := filepath.Join(dir, "ledger.db")
	l, err := idem.OpenLedger(path) // creates it
	if err != nil {
		return result{}, err
	}
	l.Close()
	exe, err := os.Executable()
	if err != nil {
		return result{}, err
	}
	var (
		mu    sync.Mutex
		waits []time.Duration
		wg    sync.WaitGroup
		errs  = make([]error, lockWaitWriters)
	)
	start := time.Now()
	for i := range lockWaitWriters {
		cmd := exec.CommandContext(ctx, exe)
		cmd.Env = append(os.Environ(), lockWaitChildEnv+"="+path, "IDEM_BENCH_LOCKWAIT_ID="+strconv.Itoa(i), "IDEM_BENCH_LOCKWAIT_N="+strconv.Itoa(cfg.n))
		cmd.Stderr = os.Stderr
		out, err := cmd.StdoutPipe()
		if err != nil {
			return result{}, err
		}
		if err := cmd.Start(); err != nil {
			return result{}, err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []time.Duration
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				us, err := strconv.ParseInt(strings.TrimSpace(sc.Text()), 10, 64)
				if err != nil {
					errs[i] = fmt.Errorf("writer %d: %q", i, sc.Text())
					continue
				}
				mine = append(mine, time.Duration(us)*time.Microsecond)
			}
			if err := cmd.Wait(); err != nil && errs[i] == nil {
				errs[i] = fmt.Errorf("writer %d: %w", i, err)
			}
			mu.Lock()
			waits = append(waits, mine...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	for _, err := range errs {
		if err != nil {
			return result{}, err
		}
	}
	if len(waits) == 0 {
		return result{}, fmt.Errorf("no write reported its wait")
	}
	slices.Sort(waits)
	q := func(p float64) time.Duration { return waits[min(len(waits)-1, int(p*float64(len(waits))))] }
	ms := func(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond)) }
	return result{text: fmt.Sprintf("p50=%s p99=%s max=%s (wait for the write lock; %d writer processes, %d writes in %.1f s)",
		ms(q(0.50)), ms(q(0.99)), ms(waits[len(waits)-1]), lockWaitWriters, len(waits), elapsed.Seconds())}, nil
}

// lockWaitChild is a writer process of sqlite_write_lock_wait: it prints
// each write's wait for the write lock, in microseconds, one a line.
func lockWaitChild() int {
	path := os.Getenv(lockWaitChildEnv)
	id := os.Getenv("IDEM_BENCH_LOCKWAIT_ID")
	n, _ := strconv.Atoi(os.Getenv("IDEM_BENCH_LOCKWAIT_N"))
	l, err := idem.OpenLedger(path)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench: writer:", err)
		return 1
	}
	defer l.Close()
	var mu sync.Mutex
	var waits []time.Duration
	ctx := idemstore.WithTrace(context.Background(), &idemstore.Trace{WriteLock: func(d time.Duration) {
		mu.Lock()
		waits = append(waits, d)
		mu.Unlock()
	}})
	rctx, stopRelay := context.WithCancel(ctx)
	relayDone := make(chan struct{})
	go func() {
		defer close(relayDone)
		outbox.Relay(rctx, l, outbox.DeliverFunc(func(context.Context, outbox.Delivery) error { return nil }), outbox.WithPoll(2*time.Millisecond))
	}()
	var wg sync.WaitGroup
	var runErr error
	var errMu sync.Mutex
	for g := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := g; i < n; i += 2 {
				key := idem.Key{Job: "lockwait-" + id, Period: fmt.Sprintf("%07d", i)}
				if err := l.Run(ctx, key, noop); err != nil {
					errMu.Lock()
					runErr = err
					errMu.Unlock()
					return
				}
			}
		}()
	}
	wg.Wait()
	stopRelay()
	<-relayDone
	if runErr != nil {
		fmt.Fprintln(os.Stderr, "bench: writer:", runErr)
		return 1
	}
	w := bufio.NewWriter(os.Stdout)
	for _, d := range waits {
		fmt.Fprintln(w, d.Microseconds())
	}
	w.Flush()
	return 0
}
