package main

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/bench/internal/rusage"
)

// config is what every comparison gets.
type config struct {
	n        int    // keys per measurement
	rounds   int    // measured rounds per side
	pgDSN    string // flag value; pg resolves it
	pg       *pgProvider
	redis    *serverProvider // Redis address, for the redis_ comparisons
	mysql    *serverProvider // MySQL DSN, for the mysql_ comparisons
	side     string          // "idem", "other" or "both"
	noWarmup bool
	other    string // the comparison's other side: "floor", "river" or "asynq"

	idleWindow   time.Duration // scheduler_idle_cpu: the measured window
	wakeSeconds  int           // scheduler_wake_latency: seconds of one-second periods measured
	otelRoundMin int           // otel_sdk_fresh_run_vs_plain: the fewest Runs a round (0 in the tests: n)
	c16RoundMin  int           // concurrent16_fresh_run_vs_sequential_floor: the fewest Runs a round (0 in the tests: n)
}

// comparison is one line of the output: idem against other ("floor",
// "river" or "asynq").
type comparison struct {
	name  string
	other string
	run   func(ctx context.Context, cfg config) (result, error)
}

// comparisons in the order they are printed.
var comparisons = []comparison{
	{"fresh_run_vs_floor", "floor", freshRunVsFloor},
	{"fresh_run_vs_river", "river", freshRunVsRiver},
	{"duplicate_vs_floor", "floor", duplicateVsFloor},
	{"duplicate_vs_river", "river", duplicateVsRiver},
	{"runtx_vs_floor", "floor", runTxVsFloor},
	{"statefile_vs_floor", "floor", stateFileVsFloor},
	{"fanout_vs_floor", "floor", fanoutVsFloor},
	{"fanout_vs_river", "river", fanoutVsRiver},
	{"outbox_vs_floor", "floor", outboxVsFloor},
	{"outbox_vs_river", "river", outboxVsRiver},
	{"pg_fresh_run_vs_river", "river", pgFreshRunVsRiver},
	{"pg_duplicate_vs_river", "river", pgDuplicateVsRiver},
	{"pg_fresh_run_vs_floor", "floor", pgFreshRunVsFloor},
	{"pg_duplicate_vs_floor", "floor", pgDuplicateVsFloor},
	{"pg_runtx_vs_floor", "floor", pgRunTxVsFloor},
	{"pg_fanout_vs_floor", "floor", pgFanoutVsFloor},
	{"pg_fanout_vs_river", "river", pgFanoutVsRiver},
	{"mysql_fresh_run_vs_floor", "floor", mysqlFreshRunVsFloor},
	{"mysql_duplicate_vs_floor", "floor", mysqlDuplicateVsFloor},
	{"mysql_runtx_vs_floor", "floor", mysqlRunTxVsFloor},
	{"mysql_fanout_vs_floor", "floor", mysqlFanoutVsFloor},
	{"concurrent_fresh_run_vs_floor", "floor", concurrentFreshRunVsFloor},
	{"concurrent16_fresh_run_vs_sequential_floor", "sequential_floor", concurrent16FreshRunVsSequentialFloor},
	{"sqlite_write_lock_wait", "", sqliteWriteLockWait},
	{"pg_concurrent_fresh_run_vs_floor", "floor", pgConcurrentFreshRunVsFloor},
	{"redis_fresh_run_vs_floor", "floor", redisFreshRunVsFloor},
	{"redis_duplicate_vs_floor", "floor", redisDuplicateVsFloor},
	{"redis_fresh_run_vs_asynq", "asynq", redisFreshRunVsAsynq},
	{"redis_concurrent_fresh_run_vs_asynq", "asynq", redisConcurrentFreshRunVsAsynq},
	{"scale_fresh_run_1m_vs_empty", "empty", scaleFreshRun1MVsEmpty},
	{"scale_duplicate_1m_vs_empty", "empty", scaleDuplicate1MVsEmpty},
	{"scale_outbox_100k_vs_none", "none", scaleOutbox100kVsNone},
	{"outbox_backlog_100k_vs_empty", "empty", outboxBacklog100kVsEmpty},
	{"outbox_slow_receiver_4_topics_vs_1", "1_topic", outboxSlowReceiver4TopicsVs1},
	{"pg_outbox_backlog_100k_vs_empty", "empty", pgOutboxBacklog100kVsEmpty},
	{"scale_each_1m", "", scaleEach1M},
	{"ui_overview_1m", "", uiOverview1M},
	{"ui_job_page_1m", "", uiJobPage1M},
	{"scheduler_idle_cpu", "", schedulerIdleCPU},
	{"scheduler_wake_latency", "", schedulerWakeLatency},
	{"otel_overhead", "", otelOverhead},
	{"otel_sdk_fresh_run_vs_plain", "plain", otelSDKFreshRunVsPlain},
	{"otel_sdk_duplicate_vs_plain", "plain", otelSDKDuplicateVsPlain},
}

// result is the throughput of each side, in operations per second, or why
// the comparison was skipped.
type result struct {
	idem, other float64
	skipped     string
	text        string // a measurement that is no comparison: the line's text
	note        string // what a unit of each side is, printed under the line

	// With -count-sql: the statements each side ran in its measured
	// rounds, and how many operations those rounds did.
	idemSQL, otherSQL countSnapshot
	idemOps, otherOps int

	// The cost of each side's measured rounds in this process: CPU time
	// (zero where getrusage is missing) and heap allocations.
	idemCost, otherCost cost
}

// cost is what a side's measured rounds cost this process.
type cost struct {
	cpu    time.Duration
	allocs uint64
}

func (c cost) add(d cost) cost { return cost{c.cpu + d.cpu, c.allocs + d.allocs} }

// perOp formats c for ops operations.
func (c cost) perOp(ops int) string {
	if ops <= 0 {
		return "-"
	}
	cpu := "CPU -"
	if c.cpu > 0 {
		cpu = fmt.Sprintf("CPU %.1fµs", float64(c.cpu.Nanoseconds())/1e3/float64(ops))
	}
	return fmt.Sprintf("%s, %.0f allocs", cpu, float64(c.allocs)/float64(ops))
}

// costNow is this process's CPU time and heap allocations so far.
func costNow() cost {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	cpu, _ := rusage.CPUTime()
	return cost{cpu: cpu, allocs: ms.Mallocs}
}

// since is what the process spent from c to now.
func (c cost) since() cost {
	now := costNow()
	return cost{cpu: now.cpu - c.cpu, allocs: now.allocs - c.allocs}
}

func (r result) line(c comparison) string {
	if r.skipped != "" {
		return fmt.Sprintf("%s: skipped (%s)", c.name, r.skipped)
	}
	if r.text != "" {
		return c.name + ": " + r.text
	}
	ratio := "n/a"
	if r.idem > 0 && r.other > 0 {
		ratio = fmt.Sprintf("%.2f", r.idem/r.other)
	}
	line := fmt.Sprintf("%s: idem %s/s  %s %s/s  ratio %s", c.name, rate(r.idem), c.other, rate(r.other), ratio)
	if r.idemOps > 0 || r.otherOps > 0 {
		line += fmt.Sprintf("\n  per op: idem %s; %s %s", r.idemCost.perOp(r.idemOps), c.other, r.otherCost.perOp(r.otherOps))
	}
	if r.note != "" {
		line += "\n  note: " + r.note
	}
	if countSQL && (r.idemSQL != countSnapshot{} || r.otherSQL != countSnapshot{}) {
		line += fmt.Sprintf("\n  statements per op: idem %s; %s %s", r.idemSQL.perOp(r.idemOps), c.other, r.otherSQL.perOp(r.otherOps))
	}
	return line
}

// rate formats a throughput with three significant digits at most, as an
// integer from 100 up.
func rate(x float64) string {
	switch {
	case x == 0:
		return "-"
	case x >= 100:
		return fmt.Sprintf("%.0f", x)
	case x >= 10:
		return fmt.Sprintf("%.1f", x)
	}
	return fmt.Sprintf("%.2f", x)
}

// side is one contender of a comparison. ops runs one measurement (round
// 0 is the warm-up) and returns how many operations it did; it is timed.
// prep, if set, runs untimed before each ops.
type side struct {
	prep func(ctx context.Context, round int) error
	ops  func(ctx context.Context, round int) (int, error)
}

// alternate measures idem and other in turns, cfg.rounds times each after a
// warm-up round, swapping which goes first every round, and returns the
// throughput of each over all its measured rounds (total operations / total
// time): the rounds of the two sides interleave, so they see the same
// machine. With cfg.side set to one of them, the other is not run (its
// throughput is 0).
func alternate(ctx context.Context, cfg config, idemSide, other side) (result, error) {
	var idemTime, otherTime time.Duration
	var res result
	first := 0
	if cfg.noWarmup {
		first = 1
	}
	for round := first; round <= cfg.rounds; round++ {
		order := []int{0, 1}
		if round%2 == 0 {
			order = []int{1, 0}
		}
		for _, who := range order {
			s, name := idemSide, "idem"
			if who == 1 {
				s, name = other, "other"
			}
			if cfg.side != "both" && cfg.side != name {
				continue
			}
			role := "idem"
			if who == 1 {
				role = cfg.other
			}
			before := countFor(role).snapshot()
			spent := costNow()
			ops, d, err := measure(ctx, s, round)
			if err != nil {
				return result{}, fmt.Errorf("%s, round %d: %w", name, round, err)
			}
			if round == 0 {
				continue // warm-up
			}
			c := spent.since() // with the side's prep: untimed, but its cost
			stmts := countFor(role).snapshot().sub(before)
			if who == 0 {
				idemTime += d
				res.idemSQL, res.idemOps = res.idemSQL.add(stmts), res.idemOps+ops
				res.idemCost = res.idemCost.add(c)
			} else {
				otherTime += d
				res.otherSQL, res.otherOps = res.otherSQL.add(stmts), res.otherOps+ops
				res.otherCost = res.otherCost.add(c)
			}
		}
	}
	res.idem, res.other = perSecond(res.idemOps, idemTime), perSecond(res.otherOps, otherTime)
	return res, nil
}

// measure runs one measurement of s and returns how many operations it did
// and how long they took.
func measure(ctx context.Context, s side, round int) (int, time.Duration, error) {
	if s.prep != nil {
		if err := s.prep(ctx, round); err != nil {
			return 0, 0, err
		}
	}
	start := time.Now()
	n, err := s.ops(ctx, round)
	d := time.Since(start)
	if err != nil {
		return 0, 0, err
	}
	if n <= 0 || d <= 0 {
		return 0, 0, fmt.Errorf("measured %d operations in %v", n, d)
	}
	return n, d, nil
}

func perSecond(n int, d time.Duration) float64 {
	if n == 0 || d <= 0 {
		return 0
	}
	return float64(n) / d.Seconds()
}

// roundKeys returns n keys of job, new for every round: periods sort in
// round order, then in key order, and all have the same shape (a state
// file needs both).
func roundKeys(job string, round, n int) []idem.Key {
	keys := make([]idem.Key, n)
	for i := range keys {
		keys[i] = idem.Key{Job: job, Period: fmt.Sprintf("%03d-%07d", round, i)}
	}
	return keys
}

// ledgerInTempDir makes a fresh directory and opens idem's ledger in it;
// cleanup closes the ledger and removes the directory.
func ledgerInTempDir(ctx context.Context, pattern string) (dir string, l *idem.Ledger, cleanup func(), err error) {
	dir, removeDir, err := tempDir(pattern)
	if err != nil {
		return "", nil, nil, err
	}
	l, closeLedger, err := openLedger(ctx, filepath.Join(dir, "ledger.db"))
	if err != nil {
		removeDir()
		return "", nil, nil, err
	}
	return dir, l, func() { closeLedger(); removeDir() }, nil
}

// tempDir makes a fresh directory under $TMPDIR (as t.TempDir does) and
// returns a function that removes it.
func tempDir(pattern string) (string, func(), error) {
	dir, err := os.MkdirTemp("", "idem-bench-"+pattern+"-")
	if err != nil {
		return "", nil, err
	}
	return dir, func() { os.RemoveAll(dir) }, nil
}

// sqliteDSN is the DSN idem.OpenLedger uses for path: busy_timeout(10000),
// synchronous(FULL), IMMEDIATE transactions. WAL is switched on by the
// caller (idem does it when it creates its tables).
func sqliteDSN(path string) string {
	abs, _ := filepath.Abs(path)
	u := url.URL{Scheme: "file", Path: abs}
	q := url.Values{}
	q.Add("_pragma", "busy_timeout(10000)")
	q.Add("_pragma", "synchronous(FULL)")
	q.Add("_txlock", "immediate")
	return "file:" + u.EscapedPath() + "?" + q.Encode()
}

// noop is the job's work: nothing, so that only the bookkeeping is timed.
func noop(context.Context) error { return nil }
