package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/bench/internal/rusage"
	"github.com/idemgo/idem/idemstore"
)

// The scale_ lines: what idem costs as the work it keeps grows. Each
// compares idem on a ledger holding much history with idem on an empty
// one (the "empty" side), interleaved as every comparison is; or measures
// one large call. Filling the history is setup, not timed: rows written
// directly, in one transaction.

// Sizes of the scale_ lines.
const (
	scaleRecords   = 1_000_000 // done records in the full ledger
	scaleDelivered = 100_000   // delivered messages a relay keeps
	scaleItems     = 1_000_000 // items of one Each
)

// scaleSkip is why a scale_ line does not run: under the module's test
// (a few keys) filling a million rows would be most of the test's time.
func scaleSkip(cfg config) string {
	if cfg.n < 50 {
		return fmt.Sprintf("-n %d: the scale_ lines need -n 50 or more (they fill a million rows)", cfg.n)
	}
	return ""
}

// fillRuns writes n done records into l's idem_runs in one transaction:
// job's periods "h0000000" ... (which sort after the bench's round keys,
// "RRR-NNNNNNN", so new keys go in among old ones of the same job in the
// primary key), plus n/10 of ten other jobs, as a ledger that has run for
// a long time holds. Each row is as idem writes a done mark: this
// process's owner, attempt 1.
func fillRuns(ctx context.Context, l *idem.Ledger, job string, n int) error {
	now := time.Now().UnixMicro()
	_, err := l.DB().ExecContext(ctx, `WITH RECURSIVE c(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM c WHERE i + 1 < ?)
		INSERT INTO idem_runs(job, period, status, attempt, owner, lease_until, created, updated)
		SELECT CASE WHEN i % 10 < 9 THEN ? ELSE 'other-' || (i % 100 / 10) END, printf('h%07d', i), 'done', 1, ?, 0, ?, ?
		FROM c`, n, job, idemstore.Owner(), now, now)
	if err != nil {
		return err
	}
	return checkpoint(ctx, l)
}

// checkpoint moves the fill's pages from the WAL into the database file
// and empties the WAL, as a ledger that grew over time has had done by
// its automatic checkpoints long since.
func checkpoint(ctx context.Context, l *idem.Ledger) error {
	_, err := l.DB().ExecContext(ctx, `PRAGMA wal_checkpoint(TRUNCATE)`)
	return err
}

// scaleFreshRun1MVsEmpty: Ledger.Run (AtLeastOnce) of new keys on a ledger
// holding 1,000,000 done records against the same on an empty ledger.
func scaleFreshRun1MVsEmpty(ctx context.Context, cfg config) (result, error) {
	if why := scaleSkip(cfg); why != "" {
		return result{skipped: why}, nil
	}
	full, empty, cleanup, err := scaleLedgers(ctx, "scale-fresh", "fresh")
	if err != nil {
		return result{}, err
	}
	defer cleanup()
	return alternate(ctx, cfg, ledgerFreshSide(full, cfg.n), ledgerFreshSide(empty, cfg.n))
}

// scaleDuplicate1MVsEmpty: Ledger.Run of keys already done (as in
// duplicate_vs_floor) on a ledger holding 1,000,000 other done records of
// the same job and others, against the same keys on an empty ledger.
func scaleDuplicate1MVsEmpty(ctx context.Context, cfg config) (result, error) {
	if why := scaleSkip(cfg); why != "" {
		return result{skipped: why}, nil
	}
	full, empty, cleanup, err := scaleLedgers(ctx, "scale-dup", "dup")
	if err != nil {
		return result{}, err
	}
	defer cleanup()
	keys := roundKeys("dup", 0, cfg.n)
	fullSide, err := ledgerDuplicateSide(ctx, full, keys)
	if err != nil {
		return result{}, err
	}
	emptySide, err := ledgerDuplicateSide(ctx, empty, keys)
	if err != nil {
		return result{}, err
	}
	return alternate(ctx, cfg, fullSide, emptySide)
}

// scaleLedgers opens two ledgers in one fresh directory: full, holding
// scaleRecords done records (fillRuns, job's among them), and empty.
func scaleLedgers(ctx context.Context, pattern, job string) (full, empty *idem.Ledger, cleanup func(), err error) {
	dir, removeDir, err := tempDir(pattern)
	if err != nil {
		return nil, nil, nil, err
	}
	var closers []func()
	cleanup = func() {
		for _, c := range closers {
			c()
		}
		removeDir()
	}
	for _, p := range []struct {
		l    **idem.Ledger
		name string
	}{{&full, "full.db"}, {&empty, "empty.db"}} {
		l, closeLedger, err := openLedger(ctx, filepath.Join(dir, p.name))
		if err != nil {
			cleanup()
			return nil, nil, nil, err
		}
		closers = append(closers, closeLedger)
		*p.l = l
	}
	if err := fillRuns(ctx, full, job, scaleRecords); err != nil {
		cleanup()
		return nil, nil, nil, fmt.Errorf("fill: %w", err)
	}
	return full, empty, cleanup, nil
}

// scaleOutbox100kVsNone: outbox_vs_floor's idem side (RunTx + Put, then
// RelayOnce until every message is delivered) on a ledger whose outbox
// keeps 100,000 delivered messages (no retention set: a relay without
// WithRetention keeps them) against the same on a ledger with none.
func scaleOutbox100kVsNone(ctx context.Context, cfg config) (result, error) {
	if why := scaleSkip(cfg); why != "" {
		return result{skipped: why}, nil
	}
	full, empty, cleanup, err := scaleLedgers(ctx, "scale-outbox", "settle-old")
	if err != nil {
		return result{}, err
	}
	defer cleanup()
	now := time.Now().UnixMicro()
	if _, err := full.DB().ExecContext(ctx, `WITH RECURSIVE c(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM c WHERE i + 1 < ?)
		INSERT INTO idem_outbox(id, topic, payload, job, period, status, attempts, token, owner, created, delivered)
		SELECT 'settle-old/h' || printf('%07d', i) || '-0', 'settlements', '{"biz_date":"h' || printf('%07d', i) || '","amount_cent":1}',
			'settle-old', printf('h%07d', i), 'delivered', 1, 1, ?, ?, ?
		FROM c`, scaleDelivered, idemstore.Owner(), now, now); err != nil {
		return result{}, fmt.Errorf("fill outbox: %w", err)
	}
	if err := checkpoint(ctx, full); err != nil {
		return result{}, err
	}
	fullSide, closeFull, err := outboxIdemSide(ctx, full, cfg.n)
	if err != nil {
		return result{}, err
	}
	defer closeFull()
	emptySide, closeEmpty, err := outboxIdemSide(ctx, empty, cfg.n)
	if err != nil {
		return result{}, err
	}
	defer closeEmpty()
	return alternate(ctx, cfg, fullSide, emptySide)
}

// eachChildEnv, set to a directory, makes this binary the process that
// scale_each_1m measures.
const eachChildEnv = "IDEM_BENCH_EACH_DIR"

// scaleEach1M runs idem.Each over 1,000,000 no-op items (generated by an
// iterator, never held in a slice; WithBatch(500), the default workers) of
// one period in a fresh process (this binary, re-executed), on a new
// ledger, and reports the call's time and the process's peak resident set
// (getrusage's maxrss of the child, which includes the Go runtime and the
// binary's own pages).
func scaleEach1M(ctx context.Context, cfg config) (result, error) {
	if why := scaleSkip(cfg); why != "" {
		return result{skipped: why}, nil
	}
	dir, cleanup, err := tempDir("scale-each")
	if err != nil {
		return result{}, err
	}
	defer cleanup()
	exe, err := os.Executable()
	if err != nil {
		return result{}, err
	}
	cmd := exec.CommandContext(ctx, exe)
	cmd.Env = append(os.Environ(), eachChildEnv+"="+dir)
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return result{}, fmt.Errorf("child: %w", err)
	}
	d, err := time.ParseDuration(strings.TrimSpace(string(out)))
	if err != nil {
		return result{}, fmt.Errorf("child said %q: %w", out, err)
	}
	rss := "maxrss -"
	if kib, ok := rusage.MaxRSSKiB(cmd.ProcessState); ok {
		rss = fmt.Sprintf("maxrss=%.1f MiB", float64(kib)/1024)
	}
	return result{text: fmt.Sprintf("time=%.1fs (%.0f items/s)  %s (peak RSS of the process, getrusage)",
		d.Seconds(), float64(scaleItems)/d.Seconds(), rss)}, nil
}

// eachChild is the process of scale_each_1m: it prints how long the Each
// took.
func eachChild() int {
	dir := os.Getenv(eachChildEnv)
	n := scaleItems
	if s := os.Getenv("IDEM_BENCH_EACH_N"); s != "" { // for a quick look
		n, _ = strconv.Atoi(s)
	}
	ctx := context.Background()
	l, err := idem.OpenLedger(filepath.Join(dir, "ledger.db"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "each:", err)
		return 1
	}
	defer l.Close()
	items := idem.Items(func(yield func(string) bool) {
		buf := make([]byte, 0, 16)
		for i := range n {
			buf = strconv.AppendInt(append(buf[:0], "acct-"...), int64(i), 10)
			if !yield(string(buf)) {
				return
			}
		}
	})
	start := time.Now()
	res, err := idem.Each(ctx, l, idem.Key{Job: "each", Period: "2026-12-02"}, items,
		func(context.Context, string) error { return nil }, idem.WithBatch(fanoutBatch))
	d := time.Since(start)
	if err != nil {
		fmt.Fprintln(os.Stderr, "each:", err)
		return 1
	}
	if res.Counts.Done != int64(n) {
		fmt.Fprintf(os.Stderr, "each: %d items done, want %d\n", res.Counts.Done, n)
		return 1
	}
	fmt.Println(d)
	return 0
}
