// Command bench compares idem's throughput with a hand-written floor (the
// least SQL, file I/O or Redis commands that give the same durability) and
// with River and asynq, job queues, measured alternately in one process.
// See BENCHMARKS.md.
//
//	cd bench && go run .             # the quick pass: one line per comparison
//	go run . -only 'duplicate' -n 500
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"regexp"
	"runtime/pprof"
	"time"
)

func main() {
	if os.Getenv(lockWaitChildEnv) != "" {
		os.Exit(lockWaitChild())
	}
	if os.Getenv(uiChildEnv) != "" {
		os.Exit(uiChild())
	}
	if os.Getenv(eachChildEnv) != "" {
		os.Exit(eachChild())
	}
	var cfg config
	only := flag.String("only", "", "run only the comparisons whose name matches this regexp")
	flag.IntVar(&cfg.n, "n", 200, "keys per measurement (duplicate reads against the floor repeat them "+fmt.Sprint(dupPasses)+" times)")
	flag.IntVar(&cfg.rounds, "rounds", 8, "measured rounds per side, alternating idem and the other (after one warm-up round)")
	flag.StringVar(&cfg.pgDSN, "pg-dsn", os.Getenv("IDEM_TEST_PG_DSN"), "PostgreSQL DSN for the pg_ comparisons (default $IDEM_TEST_PG_DSN; else ../scripts/pg.sh starts a throwaway server)")
	redisAddr := flag.String("redis-addr", os.Getenv("IDEM_TEST_REDIS_ADDR"), "Redis host:port for the redis_ comparisons, with appendfsync always (default $IDEM_TEST_REDIS_ADDR; else ../scripts/redis.sh starts a throwaway server)")
	mysqlDSN := flag.String("mysql-dsn", os.Getenv("IDEM_TEST_MYSQL_DSN"), "MySQL or MariaDB DSN for the mysql_ comparisons, durable (innodb_flush_log_at_trx_commit=1) (default $IDEM_TEST_MYSQL_DSN; else ../scripts/mysql.sh starts a throwaway MariaDB)")
	flag.StringVar(&cfg.side, "side", "both", "run only one side: idem, other or both (for counting fsyncs under strace)")
	flag.BoolVar(&cfg.noWarmup, "no-warmup", false, "skip the warm-up round (for counting fsyncs under strace)")
	flag.DurationVar(&cfg.idleWindow, "idle-window", 30*time.Second, "scheduler_idle_cpu: how long to measure the idle Scheduler's CPU time")
	flag.IntVar(&cfg.wakeSeconds, "wake-seconds", 15, "scheduler_wake_latency: seconds of one-second periods to measure")
	flag.IntVar(&cfg.otelRoundMin, "otel-round-min", otelFreshRoundMin, "otel_sdk_fresh_run_vs_plain: the fewest fresh Runs a round makes on each side, whatever -n")
	flag.IntVar(&cfg.c16RoundMin, "concurrent16-round-min", concurrent16RoundMin, "concurrent16_fresh_run_vs_sequential_floor: the fewest fresh Runs a round makes on each side, whatever -n")
	flag.BoolVar(&countSQL, "count-sql", false, "also print the SQLite statements each side runs per operation (opens idem's ledger with NewLedger on a counting driver)")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile of the whole run to this file")
	flag.Parse()
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench: -cpuprofile:", err)
			os.Exit(2)
		}
		defer f.Close()
		defer pprof.StopCPUProfile()
	}
	re, err := regexp.Compile(*only)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench: -only:", err)
		os.Exit(2)
	}
	if cfg.n < 1 || cfg.rounds < 1 {
		fmt.Fprintln(os.Stderr, "bench: -n and -rounds must be positive")
		os.Exit(2)
	}
	cfg.pg = newPGProvider(cfg.pgDSN)
	cfg.redis = newRedisProvider(*redisAddr)
	cfg.mysql = newMySQLProvider(*mysqlDSN)
	failed := run(context.Background(), cfg, re)
	cfg.pg.close()
	cfg.redis.close()
	cfg.mysql.close()
	if failed {
		pprof.StopCPUProfile()
		os.Exit(1)
	}
}

// run prints the comparisons whose name re matches and reports whether
// one failed.
func run(ctx context.Context, cfg config, re *regexp.Regexp) (failed bool) {
	fmt.Println(header())
	for _, c := range comparisons {
		if !re.MatchString(c.name) {
			continue
		}
		cfg.other = c.other
		res, err := c.run(ctx, cfg)
		if err != nil {
			fmt.Printf("%s: error: %v\n", c.name, err)
			failed = true
			continue
		}
		fmt.Println(res.line(c))
	}
	return failed
}
