package main

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"time"
)

// fsyncSamples is how many syncs the header's fsync latency is measured
// over.
const fsyncSamples = 100

// fsyncLatency measures, in a new file under $TMPDIR (where the SQLite
// comparisons keep their databases), the time of writing 4 KiB and
// fsyncing the file, n times: what a durable commit costs at least on
// this disk. It returns the median and the 90th percentile.
func fsyncLatency(n int) (median, p90 time.Duration, err error) {
	dir, remove, err := tempDir("fsync")
	if err != nil {
		return 0, 0, err
	}
	defer remove()
	f, err := os.Create(filepath.Join(dir, "probe"))
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	page := make([]byte, 4096)
	d := make([]time.Duration, n)
	for i := range d {
		start := time.Now()
		if _, err := f.WriteAt(page, int64(i%16)*4096); err != nil {
			return 0, 0, err
		}
		if err := f.Sync(); err != nil {
			return 0, 0, err
		}
		d[i] = time.Since(start)
	}
	slices.Sort(d)
	return d[n/2], d[n*9/10], nil
}

// header is the run's first lines: the machine, and its fsync latency,
// which decides whether a durable path is bound by the disk (slow
// flushes: idem and its floor wait for the same fsync) or by CPU and
// round trips (fast flushes: idem's own cost shows).
func header() string {
	s := fmt.Sprintf("# %s/%s, %d CPUs, %s", runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), runtime.Version())
	med, p90, err := fsyncLatency(fsyncSamples)
	if err != nil {
		return s + "\n# fsync latency: not measured: " + err.Error()
	}
	return s + fmt.Sprintf("\n# fsync latency in %s: median %s, p90 %s (4 KiB write + fsync, %d times)",
		os.TempDir(), med.Round(time.Microsecond), p90.Round(time.Microsecond), fsyncSamples) +
		"\n# per op: this process's CPU time and heap allocations per operation, of each side's measured rounds" +
		"\n# (a database or Redis server's own CPU is not counted)"
}
