// Command bench compares idem's throughput with a hand-written floor (the
// least SQL or file I/O that gives the same durability) and with River, a
// job queue, measured alternately in one process. See BENCHMARKS.md.
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
)

func main() {
	var cfg config
	only := flag.String("only", "", "run only the comparisons whose name matches this regexp")
	flag.IntVar(&cfg.n, "n", 200, "keys per measurement (duplicate reads against the floor repeat them "+fmt.Sprint(dupPasses)+" times)")
	flag.IntVar(&cfg.rounds, "rounds", 8, "measured rounds per side, alternating idem and the other (after one warm-up round)")
	flag.StringVar(&cfg.pgDSN, "pg-dsn", os.Getenv("IDEM_TEST_PG_DSN"), "PostgreSQL DSN for the pg_ comparisons (default $IDEM_TEST_PG_DSN; else ../scripts/pg.sh starts a throwaway server)")
	flag.StringVar(&cfg.side, "side", "both", "run only one side: idem, other or both (for counting fsyncs under strace)")
	flag.BoolVar(&cfg.noWarmup, "no-warmup", false, "skip the warm-up round (for counting fsyncs under strace)")
	flag.BoolVar(&countSQL, "count-sql", false, "also print the SQLite statements each side runs per operation (opens idem's ledger with NewLedger on a counting driver)")
	flag.Parse()
	re, err := regexp.Compile(*only)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench: -only:", err)
		os.Exit(2)
	}
	if cfg.n < 1 || cfg.rounds < 1 {
		fmt.Fprintln(os.Stderr, "bench: -n and -rounds must be positive")
		os.Exit(2)
	}
	ctx := context.Background()
	pg := newPGProvider(cfg.pgDSN)
	defer pg.close()
	cfg.pg = pg

	failed := false
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
	if failed {
		os.Exit(1)
	}
}
