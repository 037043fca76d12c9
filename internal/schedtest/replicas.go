package schedtest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemtest"
	"github.com/idemgo/idem/internal/holder"
	"github.com/idemgo/idem/internal/proc"
	"github.com/idemgo/idem/internal/testwait"
)

// An Opener opens the store under test from the argument the test passed
// to Goroutines or Processes (a file's path, a schema); close releases it.
type Opener func(ctx context.Context, arg string) (s idem.Store, close func(), err error)

// replicaStart is the wall time the replica tests start at.
var replicaStart = time.Date(2026, 3, 1, 0, 30, 0, 0, time.UTC)

// Goroutines runs three Schedulers in goroutines, each on a store of its
// own that open opens on arg (one database), with an hourly and a daily
// job, for two days of hours on one fake clock, and checks that each
// period ran exactly once.
func Goroutines(t *testing.T, arg string, open Opener) {
	clk := NewClock(replicaStart)
	var mu sync.Mutex
	ran := map[string]int{}
	fn := func(ctx context.Context, p idem.Period) error {
		info, _ := idem.InfoFrom(ctx)
		mu.Lock()
		defer mu.Unlock()
		ran[info.Key.String()]++
		return nil
	}
	var scheds []*idem.Scheduler
	for range 3 {
		st, closeStore, err := open(context.Background(), arg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(closeStore)
		s := idem.NewScheduler(st, idem.WithClock(clk))
		if err := s.Add("hourly", idem.Hourly(time.UTC), fn); err != nil {
			t.Fatal(err)
		}
		if err := s.Add("daily", idem.Daily(Location(t, "Asia/Shanghai")), fn); err != nil {
			t.Fatal(err)
		}
		Serve(t, s)
		scheds = append(scheds, s)
	}
	idleAll := func() {
		for _, s := range scheds {
			Idle(t, s, clk.Now())
		}
	}
	idleAll()
	for range 48 {
		clk.Advance(time.Hour)
		idleAll()
	}
	clk.Advance(idem.DefaultLease) // replicas that found a period held look again
	idleAll()
	mu.Lock()
	defer mu.Unlock()
	want := map[string]int{}
	h := idem.Hourly(time.UTC)
	for p := idem.LastPeriod(h, replicaStart); !p.End.After(clk.Now()); p = h.Next(p) {
		want["hourly/"+p.Name] = 1
	}
	for _, d := range []string{"2026-02-28", "2026-03-01", "2026-03-02"} {
		want["daily/"+d] = 1
	}
	if fmt.Sprint(ran) != fmt.Sprint(want) {
		t.Errorf("runs per period:\ngot  %v\nwant %v", ran, want)
	}
}

// Serve runs s (Run) until t ends, then shuts it down and checks that Run
// returned ErrClosed.
func Serve(t testing.TB, s *idem.Scheduler) {
	done := make(chan error, 1)
	go func() { done <- s.Run(context.Background()) }()
	t.Cleanup(func() {
		if err := s.Shutdown(context.Background()); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
		if err := testwait.Recv(t, done, "Run to return"); !errors.Is(err, idem.ErrSchedulerClosed) {
			t.Errorf("Run: %v", err)
		}
	})
}

// killPeriod is the period whose first attempt SIGKILLs its process in
// Processes.
const killPeriod = "2026-03-01T02:00Z"

// Processes runs three Schedulers in child processes (the test binary
// re-executed), each on the store open opens on arg, with an hourly job,
// on a clock the test moves hour by hour (a FileClock). The first
// attempt of the period 02:00 SIGKILLs its process mid-run; another
// replica must finish it. Each period is done once in the store, and its
// fn completed once.
func Processes(t *testing.T, arg string, open Opener) {
	dir := t.TempDir()
	clock, logPath, stop := filepath.Join(dir, "clock"), filepath.Join(dir, "fn.log"), filepath.Join(dir, "stop")
	if !idemtest.IsChild(t) {
		SetFileClock(t, clock, replicaStart)
	}
	type exit struct {
		i int
		e idemtest.Exit
	}
	exits := make(chan exit, 3)
	for i := range 3 {
		c := idemtest.Start(t, dir+"|"+arg, func(a string) {
			d, arg, _ := strings.Cut(a, "|")
			if err := replica(d, arg, open); err != nil {
				fmt.Fprintln(os.Stderr, "replica:", err)
				os.Exit(1)
			}
		})
		go func() { exits <- exit{i, c.Wait()} }()
	}
	st, closeStore, err := open(context.Background(), arg)
	if err != nil {
		t.Fatal(err)
	}
	defer closeStore()
	isDone := func(name string) bool {
		rec, ok, err := st.Lookup(context.Background(), idem.Key{Job: "hourly", Period: name})
		return err == nil && ok && rec.Status == idem.StatusDone
	}
	h := idem.Hourly(time.UTC)
	now := replicaStart
	var last []string
	for range 6 {
		p := idem.LastPeriod(h, now)
		last = append(last, p.Name)
		if p.Name == killPeriod {
			x := testwait.Recv(t, exits, "the replica that runs %s to kill itself", p.Name)
			if !x.e.Killed {
				t.Fatalf("replica %d ended, not killed: code %d\n%s", x.i, x.e.Code, x.e.Output)
			}
			// The others take the period over. Where a replica can tell
			// that the killed holder is gone (a process of this host), it
			// probes it every second of its clock: a step of two seconds
			// lets the probe through, and it leaves the lease of a replica
			// that took the period over already (its claim saw the holder
			// gone) running. Elsewhere they look again once the dead
			// holder's lease ended — a jump no replica can have taken the
			// period over before, as none can see the holder's death.
			rec, ok, err := st.Lookup(context.Background(), idem.Key{Job: "hourly", Period: p.Name})
			if err != nil || !ok {
				t.Fatalf("Lookup %s after the kill: found %v, %v", p.Name, ok, err)
			}
			switch {
			case holder.Local(rec.Owner):
				now = now.Add(2 * time.Second)
			case rec.Attempt == 1:
				now = now.Add(idem.DefaultLease + time.Second)
			}
			SetFileClock(t, clock, now)
		}
		// Done in the store, not only in fn's log: a run that still holds
		// its period when the clock jumps an hour on would lose its lease.
		testwait.Until(t, func() bool { return isDone(p.Name) },
			"a replica to complete %s (fn's log in %s)", p.Name, logPath)
		now = now.Add(time.Hour)
		SetFileClock(t, clock, now)
	}
	if err := os.WriteFile(stop, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		x := testwait.Recv(t, exits, "the replicas to stop")
		if x.e.Killed || x.e.Code != 0 {
			t.Errorf("replica %d: killed %v, code %d\n%s", x.i, x.e.Killed, x.e.Code, x.e.Output)
		}
	}
	log := readFile(logPath)
	for _, name := range last {
		starts, dones := strings.Count(log, "start "+name+" "), strings.Count(log, "done "+name+" ")
		wantStarts := 1
		if name == killPeriod {
			wantStarts = 2
		}
		if starts != wantStarts || dones != 1 {
			t.Errorf("%s: %d starts, %d completions, want %d and 1; fn's log:\n%s", name, starts, dones, wantStarts, log)
		}
	}
}

// replica is a child of Processes: a Scheduler with the hourly job until
// the file stop appears.
func replica(dir, arg string, open Opener) error {
	st, closeStore, err := open(context.Background(), arg)
	if err != nil {
		return err
	}
	defer closeStore()
	clk := FileClock{Path: filepath.Join(dir, "clock")}
	s := idem.NewScheduler(st, idem.WithClock(clk))
	logPath := filepath.Join(dir, "fn.log")
	fn := func(ctx context.Context, p idem.Period) error {
		info, _ := idem.InfoFrom(ctx)
		appendLine(logPath, fmt.Sprintf("start %s %d %d", p.Name, os.Getpid(), info.Attempt))
		if p.Name == killPeriod && info.Attempt == 1 {
			proc.KillSelf()
		}
		appendLine(logPath, fmt.Sprintf("done %s %d %d", p.Name, os.Getpid(), info.Attempt))
		return nil
	}
	if err := s.Add("hourly", idem.Hourly(time.UTC), fn); err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		for {
			if _, err := os.Stat(filepath.Join(dir, "stop")); err == nil {
				_ = s.Shutdown(ctx)
				return
			}
			time.Sleep(5 * time.Millisecond) // a poll for the parent's signal
		}
	}()
	if err := s.Run(ctx); !errors.Is(err, idem.ErrSchedulerClosed) {
		return err
	}
	return nil
}

func appendLine(path, line string) {
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		panic(err)
	}
	defer f.Close()
	if _, err := f.WriteString(line + "\n"); err != nil {
		panic(err)
	}
}

func readFile(path string) string {
	b, _ := os.ReadFile(path)
	return string(b)
}
