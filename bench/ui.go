package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/bench/internal/rusage"
	"github.com/idemgo/idem/idemstore"
	"github.com/idemgo/idem/ui"
)

// The ui_ lines: the operators' page (module ui) on a SQLite ledger of
// uiRecords records in uiJobs jobs of daily periods. Each serves its page
// from a fresh process (this binary, re-executed) that opens the ledger,
// answers uiGets GETs of the page through a loopback server and exits;
// the line gives the median GET, the first (cold: the ledger's pages not
// yet in the process) and the process's peak resident set (getrusage's
// maxrss of the child: the Go runtime, SQLite's page cache, the page).
const (
	uiRecords = 1_000_000
	uiJobs    = 50
	uiGets    = 5
	uiJob     = "job-25" // the job whose page ui_job_page_1m serves

	uiChildEnv = "IDEM_BENCH_UI_DIR"  // set: this process is the server of a ui_ line
	uiPathEnv  = "IDEM_BENCH_UI_PATH" // the page it GETs
)

// fillUI writes n records into l's idem_runs in one transaction, as idem
// writes them (owner, attempt, updated): uiJobs jobs, each with n/uiJobs
// daily periods from 1971-01-01; every 997th failed (backing off), every
// 1999th parked, every 4999th unknown, the rest done.
func fillUI(ctx context.Context, l *idem.Ledger, n int) error {
	now := time.Now().UnixMicro()
	per := n / uiJobs
	_, err := l.DB().ExecContext(ctx, `WITH RECURSIVE c(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM c WHERE i + 1 < ?)
		INSERT INTO idem_runs(job, period, status, attempt, failures, owner, lease_until, not_before, last_error, created, updated)
		SELECT printf('job-%02d', i / ?), date('1971-01-01', '+' || (i % ?) || ' days'),
			CASE WHEN i % 997 = 0 THEN 'failed' WHEN i % 1999 = 0 THEN 'parked' WHEN i % 4999 = 0 THEN 'unknown' ELSE 'done' END,
			1, CASE WHEN i % 997 = 0 OR i % 1999 = 0 THEN 1 ELSE 0 END, ?, 0,
			CASE WHEN i % 997 = 0 THEN ? + 3600000000 ELSE 0 END,
			CASE WHEN i % 997 = 0 OR i % 1999 = 0 OR i % 4999 = 0 THEN 'bank timeout' ELSE '' END,
			? - (? - i % ?) * 86400000000, ? - (? - i % ?) * 86400000000
		FROM c`, per*uiJobs, per, per, idemstore.Owner(), now, now, per, per, now, per, per)
	if err != nil {
		return err
	}
	return checkpoint(ctx, l)
}

// uiSize is the ledger's size for cfg: under the module's test (a few
// keys) 5,000 records, not a million.
func uiSize(cfg config) int {
	if cfg.n < 50 {
		return 5_000
	}
	return uiRecords
}

// uiOverview1M: the overview (GET /) of a ledger of 1,000,000 records in
// 50 jobs.
func uiOverview1M(ctx context.Context, cfg config) (result, error) {
	return uiPage(ctx, cfg, "/")
}

// uiJobPage1M: the page of one job (20,000 records) of that ledger.
func uiJobPage1M(ctx context.Context, cfg config) (result, error) {
	return uiPage(ctx, cfg, "/job?job="+uiJob)
}

func uiPage(ctx context.Context, cfg config, page string) (result, error) {
	dir, cleanup, err := tempDir("ui")
	if err != nil {
		return result{}, err
	}
	defer cleanup()
	n := uiSize(cfg)
	l, err := idem.OpenLedger(filepath.Join(dir, "ledger.db"))
	if err != nil {
		return result{}, err
	}
	err = fillUI(ctx, l, n)
	if cerr := l.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return result{}, fmt.Errorf("fill: %w", err)
	}
	exe, err := os.Executable()
	if err != nil {
		return result{}, err
	}
	cmd := exec.CommandContext(ctx, exe)
	cmd.Env = append(os.Environ(), uiChildEnv+"="+dir, uiPathEnv+"="+page)
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return result{}, fmt.Errorf("child: %w", err)
	}
	f := strings.Fields(string(out))
	if len(f) != 3 {
		return result{}, fmt.Errorf("child said %q", out)
	}
	median, err1 := time.ParseDuration(f[0])
	first, err2 := time.ParseDuration(f[1])
	size, err3 := strconv.Atoi(f[2])
	if err1 != nil || err2 != nil || err3 != nil {
		return result{}, fmt.Errorf("child said %q", out)
	}
	rss := "maxrss -"
	if kib, ok := rusage.MaxRSSKiB(cmd.ProcessState); ok {
		rss = fmt.Sprintf("maxrss=%.1f MiB", float64(kib)/1024)
	}
	return result{text: fmt.Sprintf("time=%.1f ms (median of %d GETs of %s; first %.1f ms; %d KiB)  %s (peak RSS of the serving process, getrusage)  records=%d jobs=%d",
		ms(median), uiGets, page, ms(first), size/1024, rss, n, uiJobs)}, nil
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1e3 }

// uiChild is the process of a ui_ line: it opens the ledger, serves the
// page uiGets times through a loopback server, and prints the median and
// the first GET's time and the page's size.
func uiChild() int {
	fail := func(err error) int {
		fmt.Fprintln(os.Stderr, "ui child:", err)
		return 1
	}
	l, err := idem.OpenLedger(filepath.Join(os.Getenv(uiChildEnv), "ledger.db"))
	if err != nil {
		return fail(err)
	}
	defer l.Close()
	h, err := ui.New(l, ui.Options{Refresh: -1})
	if err != nil {
		return fail(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	var times []time.Duration
	size := 0
	for range uiGets {
		start := time.Now()
		resp, err := http.Get(srv.URL + os.Getenv(uiPathEnv))
		if err != nil {
			return fail(err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return fail(err)
		}
		times = append(times, time.Since(start))
		if resp.StatusCode != http.StatusOK {
			return fail(fmt.Errorf("GET %s: %s: %.300s", os.Getenv(uiPathEnv), resp.Status, b))
		}
		size = len(b)
	}
	first := times[0]
	slices.Sort(times)
	fmt.Println(times[len(times)/2], first, size)
	return 0
}
