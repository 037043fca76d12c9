// Package guard has the guards that defer work while this host cannot
// take more (idem.WithGuard): the memory in use, the free disk, a function
// of yours. (The Breaker that stops a fan-out from feeding a failing
// downstream is idem.Breaker.)
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

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemstore"
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

func (g MemoryGuard) Validate() error {
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
// store's own file ([idem.Ledger.Path], [idem.StateFile.Path]); a store
// without a file (a database server's) needs a Path, or the call fails
// with [idem.ErrInvalidOption].
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

// Validate reports whether g can be used: WithGuard refuses a MemoryGuard
// whose Limit is not a fraction, when the option is given.

// ForStore is g for a call on store s (idem.WithGuard asks it first): a
// DiskGuard with no Path watches s's file (s must have one).
func (g DiskGuard) ForStore(s idemstore.Store) (idem.Guard, error) {
	if g.Path != "" {
		return g, nil
	}
	p, _ := s.(interface{ Path() string })
	if p == nil || p.Path() == "" {
		return nil, fmt.Errorf("guard.DiskGuard{MinFree: %d}: the store %s has no file; give the guard a Path", g.MinFree, storeof.TypeName(s))
	}
	g.Path = p.Path()
	return g, nil
}
