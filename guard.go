package idem

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// A Guard tells whether this host can take more work now: the memory in
// use, the free disk, a downstream's health, or anything else. Calls given
// one with [WithGuard] ask it before they claim work (Run before its
// claim; Each and EachTx before each claim and before each window of items
// is marked started), and a guard that says no DEFERS the call: it stops
// claiming, leaves the work it did not start unclaimed (no attempt, no
// failure, nothing parked), and returns an error matching [ErrDeferred]
// whose *[Deferral] names the guard. The next trigger tries again.
//
// A Guard says why it refused in its error; an error in taking its measure
// (a file it cannot read) refuses too: when the host's state is unknown,
// the safe answer is not to push through. Check must be quick (it runs
// before every window) and safe for concurrent use.
type Guard interface {
	// Name names the guard in logs, in [Deferral.Reason] and in metric
	// labels: "memory", "disk", or the name given to [GuardFunc].
	Name() string
	// Check returns nil when work may go on, or why not.
	Check(ctx context.Context) error
}

// GuardFunc makes a [Guard] named name of check: a downstream's health
// endpoint, a queue's depth, a maintenance window. name should be a short
// constant (it is a metric label).
func GuardFunc(name string, check func(ctx context.Context) error) Guard {
	return funcGuard{name, check}
}

type funcGuard struct {
	name  string
	check func(context.Context) error
}

func (g funcGuard) Name() string                    { return g.name }
func (g funcGuard) Check(ctx context.Context) error { return g.check(ctx) }

// Deferral says why a call was deferred: what [errors.As] finds in an
// error matching [ErrDeferred].
type Deferral struct {
	Reason string    // the guard's Name, or "breaker"
	Until  time.Time // an open breaker: when it lets a probe through; zero for a guard
	Err    error     // what the guard said; nil for a breaker
}

// ReasonBreaker is [Deferral.Reason] when an open [Breaker] deferred the
// call.
const ReasonBreaker = "breaker"

func (d *Deferral) Error() string {
	if d.Reason == ReasonBreaker {
		return "breaker open until " + d.Until.UTC().Format(time.RFC3339Nano)
	}
	msg := "guard " + d.Reason
	if d.Err != nil {
		msg += ": " + d.Err.Error()
	}
	return msg
}

// Unwrap returns the guard's error.
func (d *Deferral) Unwrap() error { return d.Err }

// DefaultMemoryLimit is the share of memory in use above which a
// [MemoryGuard] with no Limit defers work (seed: "memory above 85 %").
const DefaultMemoryLimit = 0.85

// MemoryGuard defers work while the memory in use is above Limit, a
// fraction of the memory available to this process: its cgroup's limit
// (cgroup v2: memory.current less the reclaimable inactive file cache of
// memory.stat, over memory.max) when the cgroup has one, else the host's
// (/proc/meminfo: MemTotal less MemAvailable, over MemTotal). It reads
// Linux files; elsewhere, or where they cannot be read, its Check returns
// the read error, which defers every call: use a [GuardFunc] there.
type MemoryGuard struct {
	Limit float64 // 0 < Limit <= 1; 0 means DefaultMemoryLimit

	// The files read, for tests; empty means the process's own: Cgroup is
	// the cgroup v2 directory (default: /sys/fs/cgroup joined with the
	// "0::" line of /proc/self/cgroup), Meminfo the meminfo file (default
	// /proc/meminfo).
	Cgroup  string
	Meminfo string
}

// Name returns "memory".
func (MemoryGuard) Name() string { return "memory" }

func (g MemoryGuard) limit() float64 {
	if g.Limit == 0 {
		return DefaultMemoryLimit
	}
	return g.Limit
}

func (g MemoryGuard) validate() error {
	if l := g.limit(); !(l > 0 && l <= 1) {
		return fmt.Errorf("MemoryGuard{Limit: %v}: the limit is a fraction of memory, above 0 and at most 1", g.Limit)
	}
	return nil
}

// Check reads the memory in use and refuses above the limit.
func (g MemoryGuard) Check(ctx context.Context) error {
	used, total, source, err := g.usage()
	if err != nil {
		return err
	}
	share := float64(used) / float64(total)
	if share > g.limit() {
		return fmt.Errorf("memory in use %.1f%% of %s (%s), above %.1f%%", 100*share, bytesText(total), source, 100*g.limit())
	}
	return nil
}

// usage returns the bytes in use and the bytes available, and what they
// were read from.
func (g MemoryGuard) usage() (used, total uint64, source string, err error) {
	dir := g.Cgroup
	if dir == "" && g.Meminfo == "" {
		dir = ownCgroup()
	}
	if dir != "" {
		used, total, err := cgroupUsage(dir)
		if err == nil && total > 0 {
			return used, total, filepath.Join(dir, "memory.max"), nil
		}
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return 0, 0, "", err
		}
	}
	path := g.Meminfo
	if path == "" {
		path = "/proc/meminfo"
	}
	used, total, err = meminfoUsage(path)
	return used, total, path, err
}

// ownCgroup is the cgroup v2 directory of this process, or "" if it has
// none.
func ownCgroup() string {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "0::"); ok {
			return filepath.Join("/sys/fs/cgroup", rest)
		}
	}
	return ""
}

// cgroupUsage reads a cgroup v2 directory: total is 0 when the cgroup has
// no memory limit ("max").
func cgroupUsage(dir string) (used, total uint64, err error) {
	maxText, err := os.ReadFile(filepath.Join(dir, "memory.max"))
	if err != nil {
		return 0, 0, err
	}
	if s := strings.TrimSpace(string(maxText)); s != "max" {
		if total, err = strconv.ParseUint(s, 10, 64); err != nil {
			return 0, 0, fmt.Errorf("%s: %w", filepath.Join(dir, "memory.max"), err)
		}
	}
	cur, err := os.ReadFile(filepath.Join(dir, "memory.current"))
	if err != nil {
		return 0, 0, err
	}
	if used, err = strconv.ParseUint(strings.TrimSpace(string(cur)), 10, 64); err != nil {
		return 0, 0, fmt.Errorf("%s: %w", filepath.Join(dir, "memory.current"), err)
	}
	// The page cache the kernel can drop at once is not pressure (the
	// working set, as the kubelet counts it).
	if stat, err := os.ReadFile(filepath.Join(dir, "memory.stat")); err == nil {
		if v, ok := field(stat, "inactive_file", 1); ok && v < used {
			used -= v
		}
	}
	return used, total, nil
}

// meminfoUsage reads a /proc/meminfo file.
func meminfoUsage(path string) (used, total uint64, err error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, 0, err
	}
	total, ok1 := field(b, "MemTotal:", 1024)
	avail, ok2 := field(b, "MemAvailable:", 1024)
	if !ok1 || !ok2 || total == 0 || avail > total {
		return 0, 0, fmt.Errorf("%s: no MemTotal and MemAvailable lines", path)
	}
	return total - avail, total, nil
}

// field finds the line "name value" in b and returns value*unit.
func field(b []byte, name string, unit uint64) (uint64, bool) {
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) >= 2 && f[0] == name {
			v, err := strconv.ParseUint(f[1], 10, 64)
			return v * unit, err == nil
		}
	}
	return 0, false
}

// DiskGuard defers work while the filesystem holding Path has fewer than
// MinFree bytes free for unprivileged writers. An empty Path means the
// store's own file ([Ledger.Path], [StateFile.Path]); a store without a
// file (a database server's) needs a Path, or the call fails with
// [ErrInvalidOption].
//
// It keeps the ledger from filling the disk in the first place. A disk that
// fills anyway (another process wrote to it) stops the call with the
// store's write error: the done marks are transactions, so none is half
// written, and the next run with space goes on from the last one.
type DiskGuard struct {
	Path    string
	MinFree int64
}

// Name returns "disk".
func (DiskGuard) Name() string { return "disk" }

// Check refuses when the free space is below MinFree.
func (g DiskGuard) Check(ctx context.Context) error {
	if g.Path == "" {
		return errors.New("DiskGuard with no Path")
	}
	free, err := freeBytes(g.Path)
	if errors.Is(err, os.ErrNotExist) { // a ledger not created yet: its directory
		free, err = freeBytes(filepath.Dir(g.Path))
	}
	if err != nil {
		return fmt.Errorf("free space of %s: %w", g.Path, err)
	}
	if free < uint64(g.MinFree) {
		return fmt.Errorf("%s free at %s, below %s", bytesText(free), g.Path, bytesText(uint64(g.MinFree)))
	}
	return nil
}

func bytesText(n uint64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

// bindGuards returns gs for a call on store s: a DiskGuard with no Path
// watches s's file.
func bindGuards(gs []Guard, s any) ([]Guard, error) {
	var out []Guard
	for i, g := range gs {
		if d, ok := g.(DiskGuard); ok && d.Path == "" {
			p, _ := s.(interface{ Path() string })
			if p == nil || p.Path() == "" {
				return nil, invalidOption("WithGuard(DiskGuard{MinFree: %d}): the store %T has no file; give the guard a Path", d.MinFree, s)
			}
			if out == nil {
				out = append([]Guard(nil), gs...)
			}
			d.Path = p.Path()
			out[i] = d
		}
	}
	if out == nil {
		return gs, nil
	}
	return out, nil
}

// checkGuards asks gs in order and returns the first refusal, logged.
func checkGuards(ctx context.Context, gs []Guard, logger *slog.Logger, key Key) *Deferral {
	for _, g := range gs {
		if err := g.Check(ctx); err != nil {
			d := &Deferral{Reason: g.Name(), Err: err}
			logDeferral(ctx, logger, key, d)
			return d
		}
	}
	return nil
}

func logDeferral(ctx context.Context, logger *slog.Logger, key Key, d *Deferral) {
	if logger == nil {
		return
	}
	logger.LogAttrs(ctx, slog.LevelWarn, "idem: deferred", slog.String("job", key.Job), slog.String("period", key.Period),
		slog.String("reason", d.Reason), slog.String("why", d.Error()))
}
