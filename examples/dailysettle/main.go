// Command dailysettle settles a business day from a flow table, the way a
// cron job at 02:00 would, and shows what idem does when the job is
// triggered twice and when it is killed in the middle of a run.
//
//	go run ./examples/dailysettle
//
// The settlement recomputes the day's amount from the flow table and
// upserts it by business date in the same transaction as idem's done mark
// (Ledger.RunTx): a second trigger does nothing, and a run killed before its
// commit leaves nothing behind, so the next trigger settles the day once.
//
// The kill is a SIGKILL, which Windows does not have: there the child ends
// with exit status 1, and the demo stops at that step (it cannot tell the
// kill from a failure).
package main

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/idemgo/idem"
)

const (
	childEnv = "DAILYSETTLE_CHILD_DIR"
	nowEnv   = "DAILYSETTLE_NOW" // the child's clock, set by the demo
)

// clock is the demo's clock: it reads a time the demo sets, so each step
// happens at a stated moment (and the demo never waits for a lease to
// expire in real time).
type clock struct{ now time.Time }

func (c *clock) Now() time.Time                         { return c.now }
func (c *clock) After(d time.Duration) <-chan time.Time { return time.After(d) }

func main() {
	dirFlag := flag.String("dir", "", "keep the database in this directory (default: a temporary one, removed at exit)")
	flag.Parse()
	log.SetFlags(0)
	if dir := os.Getenv(childEnv); dir != "" {
		child(dir)
		return
	}
	dir := *dirFlag
	if dir == "" {
		tmp, err := os.MkdirTemp("", "idem-dailysettle-")
		if err != nil {
			log.Fatal(err)
		}
		defer os.RemoveAll(tmp)
		dir = tmp
	}
	if err := demo(context.Background(), dir); err != nil {
		log.Fatal(err)
	}
}

// yesterday is the business day a run at t settles: the last day that has
// ended at t in the business time zone, whenever the run actually starts.
func yesterday(t time.Time, loc *time.Location) string {
	return idem.LastPeriod(idem.Daily(loc), t).Name
}

func open(dir string, clk idem.Clock) (*idem.Ledger, error) {
	l, err := idem.OpenLedger(filepath.Join(dir, "settle.db"), idem.WithClock(clk))
	if err != nil {
		return nil, err
	}
	_, err = l.DB().Exec(`
		CREATE TABLE IF NOT EXISTS flow(id INTEGER PRIMARY KEY, biz_date TEXT NOT NULL, amount_cent INTEGER NOT NULL);
		CREATE TABLE IF NOT EXISTS daily_settle(biz_date TEXT PRIMARY KEY, amount_cent INTEGER NOT NULL, updated_at TEXT NOT NULL);
		INSERT OR IGNORE INTO flow VALUES (1,'2026-10-27',1000), (2,'2026-10-27',500), (3,'2026-10-28',700), (4,'2026-10-28',-200);`)
	if err != nil {
		l.Close()
		return nil, err
	}
	return l, nil
}

// settle recomputes the day's amount and upserts it by date. It never adds
// to the stored amount: running it twice writes the same row.
func settle(ctx context.Context, tx *sql.Tx, day string) error {
	_, err := tx.ExecContext(ctx, `
		INSERT INTO daily_settle(biz_date, amount_cent, updated_at)
		SELECT ?, coalesce(sum(amount_cent), 0), datetime('now') FROM flow WHERE biz_date = ?
		ON CONFLICT(biz_date) DO UPDATE SET amount_cent = excluded.amount_cent, updated_at = excluded.updated_at
		WHERE daily_settle.amount_cent <> excluded.amount_cent`, day, day)
	return err
}

func trigger(ctx context.Context, l *idem.Ledger, day string) (idem.Result, error) {
	var res idem.Result
	err := l.RunTx(ctx, idem.Key{Job: "daily_settle", Period: day}, func(ctx context.Context, tx *sql.Tx) error {
		return settle(ctx, tx, day)
	}, idem.ReportTo(&res))
	return res, err
}

// demo runs the demonstration in dir. When ctx ends while the child runs,
// the child is sent SIGQUIT (it prints its goroutines to stderr), then
// killed 10 s later.
func demo(ctx context.Context, dir string) error {
	loc := time.FixedZone("CST", 8*3600) // the business zone, Asia/Shanghai
	run1 := time.Date(2026, 10, 28, 2, 0, 0, 0, loc)
	clk := &clock{now: run1}
	l, err := open(dir, clk)
	if err != nil {
		return err
	}
	defer l.Close()
	fmt.Printf("ledger and business tables: %s\n\n", l.Path())

	day := yesterday(run1, loc)
	fmt.Printf("step 1: cron fires at %s; the run settles business day %s\n", run1.Format("2006-01-02 15:04"), day)
	res, err := trigger(ctx, l, day)
	if err != nil {
		return err
	}
	fmt.Printf("        -> %s (attempt %d); %s\n", res.Outcome, res.Attempt, amounts(l))

	fmt.Printf("step 2: cron fires again for %s (the previous run overlapped, or a drained node's Pod was re-created)\n", day)
	if res, err = trigger(ctx, l, day); err != nil {
		return err
	}
	fmt.Printf("        -> %s: nothing written; %s\n", res.Outcome, amounts(l))

	run2 := run1.AddDate(0, 0, 1)
	day2 := yesterday(run2, loc)
	clk.now = run2
	fmt.Printf("step 3: at %s the run for %s starts in another process and is killed (SIGKILL) inside its transaction\n",
		run2.Format("2006-01-02 15:04"), day2)
	cmd := exec.CommandContext(ctx, os.Args[0])
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGQUIT) }
	cmd.WaitDelay = 10 * time.Second
	cmd.Env = append(os.Environ(), childEnv+"="+dir, nowEnv+"="+run2.Format(time.RFC3339))
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	err = cmd.Run()
	var ee *exec.ExitError
	if ctx.Err() != nil {
		return fmt.Errorf("the child did not end: %w (sent SIGQUIT: its goroutines are on stderr); %v", context.Cause(ctx), err)
	}
	if !errors.As(err, &ee) || !ee.Sys().(syscall.WaitStatus).Signaled() {
		return fmt.Errorf("the child was not killed: %v", err)
	}
	_, found, err := l.Lookup(ctx, idem.Key{Job: "daily_settle", Period: day2})
	if err != nil {
		return err
	}
	if found {
		return fmt.Errorf("the killed transaction left a record of %s", day2)
	}
	fmt.Printf("        -> child %v; ledger: no record of %s (its claim was in the same transaction)\n", ee.String(), day2)
	fmt.Printf("        -> %s (the killed transaction left nothing)\n", amounts(l))

	clk.now = run2.Add(10 * time.Second)
	fmt.Printf("step 4: triggered again at %s: nothing to wait for, the day is settled now\n", clk.now.Format("15:04:05"))
	if res, err = trigger(ctx, l, day2); err != nil {
		return err
	}
	fmt.Printf("        -> %s (attempt %d); %s\n", res.Outcome, res.Attempt, amounts(l))

	fmt.Printf("step 5: and once more\n")
	if res, err = trigger(ctx, l, day2); err != nil {
		return err
	}
	fmt.Printf("        -> %s; %s\n", res.Outcome, amounts(l))
	fmt.Println("\neach business day settled exactly once.")
	return nil
}

// child runs the settlement of 2026-10-28 and dies before committing.
func child(dir string) {
	now, err := time.Parse(time.RFC3339, os.Getenv(nowEnv))
	if err != nil {
		log.Fatal(err)
	}
	l, err := open(dir, &clock{now: now})
	if err != nil {
		log.Fatal(err)
	}
	day := "2026-10-28"
	_ = l.RunTx(context.Background(), idem.Key{Job: "daily_settle", Period: day}, func(ctx context.Context, tx *sql.Tx) error {
		if err := settle(ctx, tx, day); err != nil {
			return err
		}
		fmt.Printf("        (child: settled %s inside the transaction; now killed before commit)\n", day)
		self, _ := os.FindProcess(os.Getpid())
		_ = self.Kill() // SIGKILL
		select {}
	})
}

func amounts(l *idem.Ledger) string {
	rows, err := l.DB().Query(`SELECT biz_date, amount_cent FROM daily_settle ORDER BY biz_date`)
	if err != nil {
		return err.Error()
	}
	defer rows.Close()
	s := "daily_settle:"
	n := 0
	for rows.Next() {
		var d string
		var a int
		_ = rows.Scan(&d, &a)
		s += fmt.Sprintf(" %s=%d", d, a)
		n++
	}
	if n == 0 {
		s += " (empty)"
	}
	return s
}
