//go:build unix

package mysqlledger_test

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"io"
	"log/slog"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/internal/testwait"
	"github.com/idemgo/idem/mysqlledger"
)

// ownServer starts a throwaway MariaDB for t alone (scripts/mysql.sh
// start), stopped when t ends, and returns its DSN: a test that crashes
// the server must not do so under the other tests.
func ownServer(t *testing.T) string {
	t.Helper()
	testDSN(t)
	out, err := mysqlScript(t, "start")
	if err != nil {
		t.Fatalf("scripts/mysql.sh start: %v\n%s", err, out)
	}
	s := strings.TrimSpace(out)
	dsn := strings.TrimSuffix(strings.TrimPrefix(s, "export "+dsnEnv+"='"), "'")
	if dsn == s {
		t.Fatalf("scripts/mysql.sh start printed %q, not an export of %s", s, dsnEnv)
	}
	t.Cleanup(func() {
		if out, err := mysqlScript(t, "stop", dsn); err != nil {
			t.Errorf("scripts/mysql.sh stop %s: %v\n%s", dsn, err, out)
		}
	})
	return dsn
}

// mysqlScript runs scripts/mysql.sh with args, two minutes at most.
func mysqlScript(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command("../scripts/mysql.sh", args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.WaitDelay = time.Second
	if err := cmd.Start(); err != nil {
		return "", err
	}
	if err := testwait.Process(cmd, 2*time.Minute); err != nil {
		return stdout.String() + stderr.String(), err
	}
	return stdout.String(), nil
}

// TestDoneMarksSurviveServerCrash: 4 workers run RunTx over 400 keys, each
// writing a business row that is NOT idempotent (n = n + 1), while the
// server is SIGKILLed and restarted 3 times (scripts/mysql.sh crash: crash
// recovery from its redo log). Afterwards every RunTx that returned nil
// has its key done and its row (0 lost), and no row was committed twice
// (0 duplicated), once every key is done.
func TestDoneMarksSurviveServerCrash(t *testing.T) {
	if testing.Short() {
		t.Skip("starts and crashes a server of its own")
	}
	t.Parallel()
	dsn := ownServer(t)
	ctx := context.Background()
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	l, err := mysqlledger.New(ctx, db, mysqlledger.WithRunOptions(idem.WithLease(time.Second),
		idem.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil)))))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`CREATE TABLE effects (period VARBINARY(255) NOT NULL PRIMARY KEY, n INT NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	const keys = 400
	period := func(i int) string { return fmt.Sprintf("p%03d", i) }
	var mu sync.Mutex
	acked := map[string]bool{}
	runAll := func(w int, stop <-chan struct{}) {
		for {
			pending := 0
			for i := range keys {
				select {
				case <-stop:
					return
				default:
				}
				k := idem.Key{Job: "crash", Period: period((i + w*7) % keys)}
				if rec, ok, err := l.Lookup(ctx, k); err == nil && ok && rec.Status == idem.StatusDone {
					continue
				}
				pending++
				err := l.RunTx(ctx, k, func(ctx context.Context, tx *sql.Tx) error {
					_, err := tx.ExecContext(ctx, `INSERT INTO effects (period, n) VALUES (?, 1) ON DUPLICATE KEY UPDATE n = n + 1`, k.Period)
					return err
				}, idem.WithBackoff(idem.Constant(time.Millisecond)))
				if err == nil {
					mu.Lock()
					acked[k.Period] = true
					mu.Unlock()
				}
			}
			if pending == 0 {
				return
			}
		}
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() { runAll(w, stop) })
	}
	for range 3 {
		time.Sleep(300 * time.Millisecond) // let some work through between crashes
		if out, err := mysqlScript(t, "crash", dsn); err != nil {
			close(stop)
			wg.Wait()
			t.Fatalf("scripts/mysql.sh crash: %v\n%s", err, out)
		}
	}
	close(stop)
	testwait.Group(t, &wg, "the workers to stop")
	mu.Lock()
	ackedBefore := len(acked)
	mu.Unlock()
	// The server is back: finish every key.
	for w := range 2 {
		wg.Go(func() { runAll(w, make(chan struct{})) })
	}
	testwait.Group(t, &wg, "every key to be done after the crashes")
	got := queryCounts(t, db, `SELECT period, n FROM effects`)
	dup, lost := 0, 0
	for i := range keys {
		p := period(i)
		rec, ok, err := l.Lookup(ctx, idem.Key{Job: "crash", Period: p})
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case !ok || rec.Status != idem.StatusDone || got[p] == 0:
			lost++
			t.Errorf("%s: record %+v, row %d: lost", p, rec, got[p])
		case got[p] > 1:
			dup++
			t.Errorf("%s: business row committed %d times", p, got[p])
		}
	}
	t.Logf("3 server crashes, %d keys acknowledged done before the last one; %d keys: %d duplicated, %d lost", ackedBefore, keys, dup, lost)
}
