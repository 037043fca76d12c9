// Package guard has the guards that defer work while this host cannot
// take more (idem.WithGuard): the memory in use, the free disk, a function
// of yours; and the Breaker that stops a fan-out from feeding a failing
// downstream (fanout.WithBreaker).
package guard

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/internal/breaker"
	"github.com/idemgo/idem/internal/hook"
	"github.com/idemgo/idem/internal/storeof"
)

// Func makes an [idem.Guard] named name of check: a downstream's health
// endpoint, a queue's depth, a maintenance window. name should be a short
// constant (it is a metric label).
func Func(name string, check func(ctx context.Context) error) idem.Guard {
	return funcGuard{name, check}
}

type funcGuard struct {
	name  string
	check func(context.Context) error
}

func (g funcGuard) Name() string                    { return g.name }
func (g funcGuard) Check(ctx context.Context) error { return g.check(ctx) }

// DefaultMemoryLimit is the share of memory in use above which a
// [MemoryGuard] with no Limit defers work (seed: "memory above 85 %").
const DefaultMemoryLimit = 0.85

// MemoryGuard defers work while the memory in use is above Limit, a
// fraction of the memory available to this process: its cgroup's limit
// (cgroup v2: memory.current less the reclaimable inactive file cache of
// memory.stat, over memory.max) when the cgroup has one, else the host's
// (/proc/meminfo: MemTotal less MemAvailable, over MemTotal). It reads
// Linux files; elsewhere, or where they cannot be read, its Check returns
// the read error, which defers every call: use a [Func] there.
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
		return fmt.Errorf("guard.MemoryGuard{Limit: %v}: the limit is a fraction of memory, above 0 and at most 1", g.Limit)
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

// ReasonBreaker is [idem.Deferral].Reason when an open [Breaker] deferred
// the call.
const ReasonBreaker = "breaker"

// Breaker is a circuit breaker on fn's errors, for fanout.Each and fanout.EachTx
// (fanout.WithBreaker): after Failures consecutive failures of fn it opens for
// CoolDown, and a call that finds it open is deferred ([idem.ErrDeferred]): it
// claims nothing, and a call that is running stops claiming, so that a
// downstream outage does not make every item fail, back off and park.
// After the cool-down it is half-open: one item runs as a probe while the
// other workers wait for it; success closes the breaker, failure opens it
// for another cool-down.
//
// What counts as a failure: an error of fn, except an [idem.Permanent] one (the
// item's own fault: it parks as without a breaker) and the end of the
// call's context. Items that failed before the breaker opened keep their
// failure (they back off as usual): at most Failures of them in a row, plus
// one for each other worker whose item was running when it opened.
//
// A Breaker keeps its state in memory, for the process: give the same one
// to every call of a job (every trigger), so that the next trigger finds it
// open or probing. It takes time from the call's clock ([idem.WithClock]). Safe
// for concurrent use; the zero Breaker is not usable, call NewBreaker.
//
// Why not sony/gobreaker: the core module depends only on SQLite, renameio
// and golang.org/x, and gobreaker reads the wall clock (time.Now) where
// idem's tests need the call's clock. This one is the part Each needs:
// consecutive failures, cool-down, one probe.
type Breaker struct {
	b *breaker.Breaker
}

// BreakerState is a Breaker's state.
type BreakerState int

// The states of a Breaker.
const (
	BreakerClosed   BreakerState = iota // items run
	BreakerOpen                         // calls are deferred until the cool-down ends
	BreakerHalfOpen                     // the cool-down ended: the next item is a probe
)

func (s BreakerState) String() string {
	switch s {
	case BreakerClosed:
		return "closed"
	case BreakerOpen:
		return "open"
	case BreakerHalfOpen:
		return "half_open"
	}
	return fmt.Sprintf("BreakerState(%d)", int(s))
}

// NewBreaker returns a closed Breaker that opens after failures consecutive
// failures, for coolDown. A failures below 1 or a coolDown not above 0 makes
// fanout.WithBreaker fail with [idem.ErrInvalidOption].
func NewBreaker(failures int, coolDown time.Duration) *Breaker {
	return &Breaker{&breaker.Breaker{Failures: failures, CoolDown: coolDown}}
}

// State returns the breaker's state at now, and when an open one lets a
// probe through.
func (b *Breaker) State(now time.Time) (BreakerState, time.Time) {
	s, until := b.b.State(now)
	return BreakerState(s), until
}

func init() {
	// The root package checks this package's guards in WithGuard, and
	// binds them to a call's store; package fanout reaches a Breaker's
	// state machine.
	hook.BindGuard = func(g any, store any) (bound any, ok bool, err error) {
		switch g := g.(type) {
		case MemoryGuard:
			return nil, false, g.validate()
		case DiskGuard:
			if store == nil || g.Path != "" {
				return nil, false, nil
			}
			p, _ := store.(interface{ Path() string })
			if p == nil || p.Path() == "" {
				return nil, false, fmt.Errorf("guard.DiskGuard{MinFree: %d}: the store %s has no file; give the guard a Path", g.MinFree, storeof.TypeName(store))
			}
			g.Path = p.Path()
			return g, true, nil
		}
		return nil, false, nil
	}
	hook.BreakerOf = func(b *Breaker) *breaker.Breaker {
		if b == nil {
			return nil
		}
		return b.b
	}
}
