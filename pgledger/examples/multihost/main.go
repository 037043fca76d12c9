// Command multihost runs the same 50 keys of a job from two worker
// processes at once, each with a pool of its own, against one PostgreSQL,
// the way two hosts would, and checks that each key's effect happened
// exactly once.
//
// Each key's effect is an INSERT into a business table, made in the same
// transaction as idem's done mark (Ledger.RunTx). The table has no unique
// constraint, so a second run of a key would show as a second row.
//
// It needs a PostgreSQL (-dsn, or $IDEM_TEST_PG_DSN). A throwaway one, from
// the repository's root:
//
//	eval "$(scripts/pg.sh start)"
//	(cd pgledger && go run ./examples/multihost)
//	scripts/pg.sh stop
//
// The demo works in a schema of its own, dropped at the end.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/pgledger"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// workerEnv tells a re-executed copy of this program that it is a worker:
// name|schema|start time (the DSN is in dsnEnv).
const (
	workerEnv = "MULTIHOST_WORKER"
	dsnEnv    = "IDEM_TEST_PG_DSN"
)

const (
	job       = "settle"
	keys      = 50
	workers   = 2
	perWorker = 4 // goroutines per worker
)

func main() {
	dsn := flag.String("dsn", os.Getenv(dsnEnv), "PostgreSQL to use (default $"+dsnEnv+")")
	flag.Parse()
	if w := os.Getenv(workerEnv); w != "" {
		if err := worker(context.Background(), os.Getenv(dsnEnv), w, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "worker:", err)
			os.Exit(1)
		}
		return
	}
	if *dsn == "" {
		fmt.Fprintf(os.Stderr, "multihost needs a PostgreSQL: pass -dsn postgres://... or set %s.\n"+
			"For a throwaway one, from the repository's root: eval \"$(scripts/pg.sh start)\" (and scripts/pg.sh stop after).\n", dsnEnv)
		os.Exit(2)
	}
	if err := demo(context.Background(), *dsn, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "multihost:", err)
		os.Exit(1)
	}
}

// period is the business day of key i.
func period(i int) string {
	return time.Date(2026, 9, 1+i, 0, 0, 0, 0, time.UTC).Format(time.DateOnly)
}

// demo starts the workers, waits for them and checks the business table.
func demo(ctx context.Context, dsn string, out io.Writer) error {
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		return err
	}
	defer pool.Close()
	schema := fmt.Sprintf("multihost_%d_%d", time.Now().UnixNano(), os.Getpid())
	s := pgx.Identifier{schema}.Sanitize()
	defer pool.Exec(context.WithoutCancel(ctx), `DROP SCHEMA IF EXISTS `+s+` CASCADE`)
	// The ledger creates the schema; the business table lives beside it.
	if _, err := pgledger.New(ctx, pool, pgledger.WithSchema(schema)); err != nil {
		return err
	}
	if _, err := pool.Exec(ctx, `CREATE TABLE `+s+`.settlements (period text NOT NULL, worker text NOT NULL, at timestamptz NOT NULL DEFAULT now())`); err != nil {
		return err
	}

	self, err := os.Executable()
	if err != nil {
		return err
	}
	start := strconv.FormatInt(time.Now().Add(time.Second).UnixNano(), 10) // both begin together
	outs := make([]strings.Builder, workers)
	cmds := make([]*exec.Cmd, workers)
	for i := range workers {
		name := string(rune('A' + i))
		cmd := exec.CommandContext(ctx, self)
		// Cut short (ctx ended), a worker prints its goroutines first.
		cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGQUIT) }
		cmd.WaitDelay = 10 * time.Second
		cmd.Env = append(os.Environ(), workerEnv+"="+name+"|"+schema+"|"+start, dsnEnv+"="+dsn)
		cmd.Stdout, cmd.Stderr = &outs[i], &outs[i]
		if err := cmd.Start(); err != nil {
			return err
		}
		cmds[i] = cmd
	}
	var failed []string
	for i, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			failed = append(failed, fmt.Sprintf("worker %c: %v", 'A'+i, err))
		}
		fmt.Fprint(out, outs[i].String())
	}
	if failed != nil {
		return errors.New(strings.Join(failed, "; "))
	}

	// The check: one row per key, and every key done in the ledger.
	var rows, distinct, done int
	if err := pool.QueryRow(ctx, `SELECT count(*), count(DISTINCT period) FROM `+s+`.settlements`).Scan(&rows, &distinct); err != nil {
		return err
	}
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM `+s+`.runs WHERE job = $1 AND status = 'done'`, job).Scan(&done); err != nil {
		return err
	}
	fmt.Fprintf(out, "check: %d keys, %d settlement rows for %d distinct keys, %d done marks: ", keys, rows, distinct, done)
	if rows != keys || distinct != keys || done != keys {
		fmt.Fprintln(out, "FAILED")
		return fmt.Errorf("want %d of each: some key's effect did not happen exactly once", keys)
	}
	fmt.Fprintln(out, "each key's effect happened exactly once")
	return nil
}

// worker runs every key, perWorker at a time, with a pool of its own, and
// prints a summary line.
func worker(ctx context.Context, dsn, arg string, out io.Writer) error {
	parts := strings.Split(arg, "|")
	if len(parts) != 3 {
		return fmt.Errorf("bad %s %q", workerEnv, arg)
	}
	name, schema := parts[0], parts[1]
	startNanos, err := strconv.ParseInt(parts[2], 10, 64)
	if err != nil {
		return err
	}
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		return err
	}
	defer pool.Close()
	l, err := pgledger.New(ctx, pool, pgledger.WithSchema(schema))
	if err != nil {
		return err
	}
	insert := `INSERT INTO ` + pgx.Identifier{schema, "settlements"}.Sanitize() + ` (period, worker) VALUES ($1, $2)`
	settle := func(ctx context.Context, tx pgx.Tx) error {
		info, _ := idem.InfoFrom(ctx)
		// A little work, so the other worker finds keys in progress.
		if _, err := tx.Exec(ctx, `SELECT pg_sleep(0.02)`); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, insert, info.Key.Period, name)
		return err
	}

	// Open the connections now, so that neither worker starts late.
	var conns []*pgxpool.Conn
	for range perWorker {
		c, err := pool.Acquire(ctx)
		if err != nil {
			return err
		}
		conns = append(conns, c)
	}
	for _, c := range conns {
		c.Release()
	}

	time.Sleep(time.Until(time.Unix(0, startNanos)))
	var (
		mu                           sync.Mutex
		ran, alreadyDone, inProgress int
		firstErr                     error
		next                         = make(chan int)
		wg                           sync.WaitGroup
	)
	for range perWorker {
		wg.Go(func() {
			for i := range next {
				key := idem.Key{Job: job, Period: period(i)}
				var res idem.Result
				err := l.RunTx(ctx, key, settle, idem.ReportTo(&res))
				busy := errors.Is(err, idem.ErrInProgress)
				for errors.Is(err, idem.ErrInProgress) {
					// The other worker has it: ask again shortly, for its outcome.
					time.Sleep(5 * time.Millisecond)
					err = l.RunTx(ctx, key, settle, idem.ReportTo(&res))
				}
				mu.Lock()
				switch {
				case err != nil:
					if firstErr == nil {
						firstErr = err
					}
				case res.Outcome == idem.Ran:
					ran++
				default:
					alreadyDone++
				}
				if busy {
					inProgress++
				}
				mu.Unlock()
			}
		})
	}
	for i := range keys {
		next <- i
	}
	close(next)
	wg.Wait()
	fmt.Fprintf(out, "worker %s (pid %d): ran %d, already done %d; found %d in progress on the other worker\n",
		name, os.Getpid(), ran, alreadyDone, inProgress)
	return firstErr
}
