// Command fanoutmem measures the peak memory of idem.Each over many no-op
// items: the item set is streamed into the ledger and worked in batches,
// never held in memory.
//
//	go run ./internal/fanoutmem -n 1000000
//
// It prints the items, the time taken and the process's peak resident set
// (VmHWM from /proc/self/status).
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"time"

	"github.com/idemgo/idem"
)

func main() {
	n := flag.Int("n", 1_000_000, "items")
	workers := flag.Int("workers", idem.DefaultWorkers, "workers")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile to this file")
	flag.Parse()
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err != nil {
			log.Fatal(err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			log.Fatal(err)
		}
		defer pprof.StopCPUProfile()
	}
	dir, err := os.MkdirTemp("", "idem-fanoutmem-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	l, err := idem.OpenLedger(filepath.Join(dir, "ledger.db"))
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()
	items := func(yield func(string, error) bool) {
		for i := range *n {
			if !yield(fmt.Sprintf("item-%08d", i), nil) {
				return
			}
		}
	}
	start := time.Now()
	lastLog := time.Now()
	res, err := idem.Each(context.Background(), l, idem.Key{Job: "noop", Period: "2026-10-27"}, items,
		func(context.Context, string) error { return nil },
		idem.WithWorkers(*workers), idem.WithBatch(500),
		idem.OnProgress(func(p idem.Progress) {
			if time.Since(lastLog) > 5*time.Second {
				lastLog = time.Now()
				fmt.Printf("  %d/%d items done, peak RSS so far %s\n", p.Done, p.Total, peak())
			}
		}))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("fanoutmem: items=%d done=%d outcome=%s time=%s peak_rss=%s\n",
		*n, res.Counts.Done, res.Outcome, time.Since(start).Round(time.Millisecond), peak())
}

// peak reads VmHWM, the peak resident set size.
func peak() string {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return "unknown"
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if v, ok := strings.CutPrefix(s.Text(), "VmHWM:"); ok {
			return strings.TrimSpace(v)
		}
	}
	return "unknown"
}
