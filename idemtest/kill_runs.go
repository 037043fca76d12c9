package idemtest

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/internal/effectlog"
)

const (
	// concurrentKillKeys new periods of job concurrentKillJob per child, run by
	// concurrentKillWorkers goroutines at once.
	concurrentKillKeys    = 240
	concurrentKillWorkers = 16
	concurrentKillJob     = "killruns"
	concurrentKillRounds  = 6
	concurrentKillLease   = 300 * time.Millisecond
)

func concurrentKillKey(i int) idem.Key {
	return idem.Key{Job: concurrentKillJob, Period: fmt.Sprintf("p%04d", i)}
}

// TestConcurrentRunKills SIGKILLs, at random moments, a process in which
// 16 goroutines run new keys at once (Run AtLeastOnce and AtMostOnce, and
// RunTx with h.Apply as the business write), six times, then runs every
// key to its end. A store that commits the writes of concurrent calls
// together (the SQLite ledger's group commit) is checked where such
// grouping could go wrong:
//
//   - every Run or RunTx that returned nil in a killed process has its key
//     done in the store right after the kill (nothing reported done was
//     not committed);
//   - at least once: every key done at the end, its fn run at least once;
//     RunTx: every key done, its business write applied exactly once;
//   - at most once: no fn ran twice; a done key ran once; the keys not done
//     are unknown (a kill between fn's effect and the done mark).
func TestConcurrentRunKills[Tx any](t *testing.T, h KillHarness[Tx]) {
	for _, mode := range []string{"tx", "at-most-once", "at-least-once"} {
		t.Run(mode, func(t *testing.T) {
			if IsChild(t) {
				Start(t, "", func(arg string) { // does not return
					f := strings.SplitN(arg, "|", 3)
					round, _ := strconv.Atoi(f[0])
					from := round * concurrentKillKeys
					if err := concurrentKillRun(h, f[2], f[1], mode, from, from+concurrentKillKeys, true); err != nil {
						fmt.Println(err)
						os.Exit(3)
					}
				})
			}
			if h.Parallel {
				t.Parallel()
			}
			testConcurrentRunKills(t, h, mode)
		})
	}
}

func testConcurrentRunKills[Tx any](t *testing.T, h KillHarness[Tx], mode string) {
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(uint64(seed), 0))
	ctx := context.Background()
	s, storeArg := h.Open(t)
	dir := t.TempDir() // the effects and reported logs
	reported := filepath.Join(dir, "reported.log")
	midway := 0
	for round := range concurrentKillRounds {
		// Each child runs new keys of its own (and leaves them to the
		// last run if killed); it is killed a moment after it reported
		// its first one, while its goroutines run the others.
		before := reportedLines(t, reported)
		c := Start(t, strconv.Itoa(round)+"|"+dir+"|"+storeArg, nil)
		exited := make(chan Exit, 1)
		go func() { exited <- c.Wait() }()
		deadline := time.Now().Add(2 * time.Minute)
		var e Exit
	wait:
		for {
			select {
			case e = <-exited: // it ended before the kill
				break wait
			case <-time.After(time.Millisecond):
			}
			if reportedLines(t, reported) > before {
				time.Sleep(time.Duration(rng.IntN(40)) * time.Millisecond)
				c.Kill()
				e = <-exited
				break
			}
			if time.Now().After(deadline) {
				c.Kill()
				t.Fatalf("round %d: waited 2 minutes for the child to report a key done; its output:\n%s", round, (<-exited).Output)
			}
		}
		if !e.Killed && e.Code != 0 {
			t.Fatalf("round %d: child: %+v", round, e)
		}
		if !e.Killed {
			continue // it finished every key before the kill
		}
		midway++
		// Every key a killed child reported done is done.
		keys, err := effectlog.Counts(reported)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Fatal(err)
		}
		for period := range keys {
			key := idem.Key{Job: concurrentKillJob, Period: period}
			rec, ok, err := s.Lookup(ctx, key)
			if err != nil || !ok || rec.Status != idem.StatusDone {
				t.Fatalf("round %d: %s was reported done by the killed process, but the store has %+v (found %v, %v)", round, key, rec, ok, err)
			}
		}
	}
	t.Logf("%d of %d children were killed at work", midway, concurrentKillRounds)
	time.Sleep(2 * concurrentKillLease) // the leases of the last child's keys run out
	if err := concurrentKillRun(h, storeArg, dir, mode, 0, concurrentKillRounds*concurrentKillKeys, false); err != nil {
		t.Fatalf("last run: %v", err)
	}

	var got map[string]int
	var err error
	if mode == "tx" {
		got = h.Applied(t, s)
	} else if got, err = effectlog.Counts(filepath.Join(dir, "effects.log")); err != nil {
		t.Fatal(err)
	}
	done, unknown := 0, 0
	for i := range concurrentKillRounds * concurrentKillKeys {
		key := concurrentKillKey(i)
		rec, ok, err := s.Lookup(ctx, key)
		if err != nil || !ok {
			t.Fatalf("%s: no record (%v)", key, err)
		}
		n := got[key.Period]
		switch rec.Status {
		case idem.StatusDone:
			done++
		case idem.StatusUnknown:
			unknown++
		}
		switch {
		case mode != "at-most-once" && rec.Status != idem.StatusDone:
			t.Errorf("%s: %s at the end, want done", key, rec.Status)
		case mode == "tx" && n != 1:
			t.Errorf("%s: business write applied %d times, want once", key, n)
		case mode == "at-least-once" && n < 1:
			t.Errorf("%s: fn never ran", key)
		case mode == "at-most-once" && n > 1:
			t.Errorf("%s: fn ran %d times", key, n)
		case mode == "at-most-once" && rec.Status == idem.StatusDone && n != 1:
			t.Errorf("%s: done, but fn ran %d times", key, n)
		case mode == "at-most-once" && rec.Status != idem.StatusDone && rec.Status != idem.StatusUnknown:
			t.Errorf("%s: %s at the end, want done or unknown", key, rec.Status)
		}
	}
	t.Logf("%s: %d keys done, %d unknown", mode, done, unknown)
}

// concurrentKillRun runs the kit's keys from..to-1 in mode from
// concurrentKillWorkers goroutines on the store h.Reopen opens from
// storeArg, the logs in dir. In a child (killed) a key whose call fails
// is left for the next run; otherwise a failure is the run's error, but
// for at most once's unknown outcomes.
func concurrentKillRun[Tx any](h KillHarness[Tx], storeArg, dir, mode string, from, to int, child bool) error {
	ctx := context.Background()
	s, done, err := h.Reopen(ctx, storeArg)
	if err != nil {
		return err
	}
	defer done()
	open := func(name string) (*os.File, error) {
		return os.OpenFile(filepath.Join(dir, name), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	}
	effects, err := open("effects.log")
	if err != nil {
		return err
	}
	defer effects.Close()
	reported, err := open("reported.log")
	if err != nil {
		return err
	}
	defer reported.Close()
	// One record, one write (O_APPEND): a SIGKILL loses nothing written,
	// and a write it cuts short is no record (effectlog).
	line := effectlog.Append
	work := func() { time.Sleep(time.Duration(rand.IntN(200)) * time.Microsecond) }
	// A killed child's leases must run out soon for the next run to take
	// its keys over; the last run (not killed) takes a long one, so that a
	// goroutine stalled on a busy machine does not lose its key to nobody.
	lease := concurrentKillLease
	if !child {
		lease = time.Minute
	}
	opts := []idem.Option{idem.WithLease(lease)}
	if mode == "at-most-once" {
		opts = append(opts, idem.AtMostOnce())
	}
	run := func(key idem.Key) error {
		if mode == "tx" {
			return idem.RunTx(ctx, s, key, func(ctx context.Context, tx Tx) error {
				work()
				return h.Apply(ctx, s, tx, key.Period)
			}, opts...)
		}
		return idem.RunOn(ctx, s, key, func(ctx context.Context) error {
			work()
			if err := line(effects, key.Period); err != nil {
				return err
			}
			work()
			return nil
		}, opts...)
	}
	var (
		mu    sync.Mutex
		first error
		wg    sync.WaitGroup
	)
	for g := range concurrentKillWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := from + g; i < to; i += concurrentKillWorkers {
				key := concurrentKillKey(i)
				err := run(key)
				switch {
				case err == nil:
					if err := line(reported, key.Period); err != nil {
						mu.Lock()
						first = cmp.Or(first, err)
						mu.Unlock()
						return
					}
				case child:
				case mode == "at-most-once" && errors.Is(err, idem.ErrUnknownOutcome):
				default:
					mu.Lock()
					first = cmp.Or(first, fmt.Errorf("%s: %w", key, err))
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	return first
}

// reportedLines counts the records of the reported log at path (0 before
// it exists).
func reportedLines(t *testing.T, path string) int {
	lines, err := effectlog.Lines(path)
	if err != nil {
		t.Fatal(err)
	}
	return len(lines)
}
