package idem_test

import (
	"context"
	"database/sql"
	"errors"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/idemgo/idem/guard"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemtest"
	"github.com/idemgo/idem/internal/testns"
)

const envDiskFull = "IDEM_TEST_DISKFULL_DIR"

// TestLedgerDiskFull first shows a DiskGuard deferring EachTx on a small
// tmpfs; then it puts the ledger on a tmpfs of 3 MiB that EachTx's own
// writes fill mid-run: the call stops with the write error, the ledger
// passes PRAGMA integrity_check, no item is marked done whose writes did
// not commit; after the tmpfs grows, the handle still refuses to write (a
// write failed on the disk), and a later call on a new handle finishes
// every item exactly once.
//
// Mounting a tmpfs needs no root: the test re-executes its binary in a new
// user and mount namespace (its own root, its own mounts), where it mounts
// the tmpfs over a temporary directory that only it sees mounted.
func TestLedgerDiskFull(t *testing.T) {
	if dir := os.Getenv(envDiskFull); dir != "" {
		diskFullChild(t, dir)
		return
	}
	testns.Run(t, envDiskFull)
}

func diskFullChild(t *testing.T, dir string) {
	testns.MountTmpfs(t, dir, "3m")
	const n = 10000
	ctx := context.Background()
	l := openLedger(t, dir)
	if _, err := l.DB().Exec(`CREATE TABLE effects(item TEXT NOT NULL, payload BLOB NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	fn := func(ctx context.Context, tx *sql.Tx, item string) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO effects(item, payload) VALUES(?, zeroblob(512))`, item)
		return err
	}
	consistent := func(when string) (done int64) {
		t.Helper()
		var check string
		if err := l.DB().QueryRow(`PRAGMA integrity_check`).Scan(&check); err != nil || check != "ok" {
			t.Fatalf("%s: PRAGMA integrity_check: %q, %v", when, check, err)
		}
		c, err := l.CountItems(ctx, points)
		if err != nil {
			t.Fatalf("%s: count items: %v", when, err)
		}
		var rows, distinct int64
		if err := l.DB().QueryRow(`SELECT count(*), count(DISTINCT item) FROM effects`).Scan(&rows, &distinct); err != nil {
			t.Fatal(err)
		}
		if rows != distinct || rows != c.Done || c.Parked+c.Unknown != 0 {
			t.Fatalf("%s: %d effects of %d items, %+v: want one effect per item marked done, none parked or unknown", when, rows, distinct, c)
		}
		return c.Done
	}

	// A disk guard that wants more free space than the tmpfs has defers
	// the call before it writes anything.
	if _, err := idem.EachTx(ctx, l, points, accounts(n), fn, idem.WithGuard(guard.DiskGuard{MinFree: 4 << 20})); !errors.Is(err, idem.ErrDeferred) {
		t.Fatalf("EachTx with a disk guard of 4 MiB on a 3 MiB tmpfs: %v, want ErrDeferred", err)
	} else {
		t.Logf("with a disk guard: %v", err)
	}
	if c, err := l.CountItems(ctx, points); err != nil || c.Total() != 0 {
		t.Fatalf("after the disk guard deferred: %+v, %v; want nothing recorded", c, err)
	}

	// The clock moves by itself when the call waits: the later call finds
	// the lease of the chunk the failed call held expired, as a later
	// trigger would.
	clk := idemtest.NewAutoClock(time.Now())
	res, err := idem.EachTx(ctx, l, points, accounts(n), fn, idem.WithClock(clk))
	t.Logf("on a full disk: %v", err)
	if err == nil || !strings.Contains(err.Error(), "full") {
		t.Fatalf("EachTx on a 3 MiB tmpfs: %v, want the write error (database or disk is full)", err)
	}
	done := consistent("after the disk filled")
	t.Logf("%d of %d items done when the disk filled", done, n)
	if done == 0 || done == n {
		t.Errorf("%d of %d items done when the disk filled, want the disk to fill mid-run", done, n)
	}

	if err := syscall.Mount("tmpfs", dir, "tmpfs", syscall.MS_REMOUNT, "size=64m"); err != nil {
		t.Fatalf("grow the tmpfs: %v", err)
	}
	// A write that failed on the disk broke the handle: it refuses every
	// write until the ledger is opened anew.
	if _, err := idem.EachTx(ctx, l, points, accounts(n), fn, idem.WithClock(clk)); err == nil || !strings.Contains(err.Error(), "opened anew") {
		t.Fatalf("EachTx on the handle whose write failed, with space: %v, want the handle's refusal", err)
	}
	l = openLedger(t, dir)
	res, err = idem.EachTx(ctx, l, points, accounts(n), fn, idem.WithClock(clk))
	if err != nil || res.Outcome != idem.Ran {
		t.Fatalf("EachTx with space: %v (%v, %+v)", err, res.Outcome, res.Counts)
	}
	if done := consistent("after the later run"); done != n {
		t.Fatalf("%d items done after the later run, want %d", done, n)
	}
}
