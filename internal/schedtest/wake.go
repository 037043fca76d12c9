package schedtest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemtest"
	"github.com/idemgo/idem/internal/testwait"
)

// WakeBound is how soon after a reset of a parked period a running
// replica must have run it: the promise of idem.SchedulerWakePoll (2 s)
// with room for a loaded machine.
const WakeBound = 10 * time.Second

// WakeProcesses runs three Schedulers in child processes (the test binary
// re-executed), each on the store open opens on arg, with a daily job
// whose latest due period the test parked before they started. Once each
// replica has found it parked, the test resets it from its own process
// (Resolve, as idem reset does), and a replica must run it within
// WakeBound of the reset, not at the job's next due time (up to a day
// later); and exactly once.
func WakeProcesses(t *testing.T, arg string, open Opener) {
	wakeProcesses(t, arg, open, false)
}

// RerunProcesses is WakeProcesses with a re-run: the daily job's latest
// due period is done before the three replicas start; once each runs its
// Scheduler (whose first look may come before or after the request: the
// request's wake mark, or the catch-up's re-runs behind the cursor), the
// test asks for a re-run of it, twice with the same request id (a
// retrying script), and a replica must run it within WakeBound, at
// revision 1, exactly once: three replicas see one request, and the
// request sent again re-runs nothing more.
func RerunProcesses(t *testing.T, arg string, open Opener) {
	wakeProcesses(t, arg, open, true)
}

func wakeProcesses(t *testing.T, arg string, open Opener, rerun bool) {
	dir := t.TempDir()
	logPath, stop := filepath.Join(dir, "fn.log"), filepath.Join(dir, "stop")
	day := idem.Daily(time.UTC)
	var key idem.Key
	var st idem.Store
	if !idemtest.IsChild(t) {
		var closeStore func()
		var err error
		st, closeStore, err = open(context.Background(), arg)
		if err != nil {
			t.Fatal(err)
		}
		defer closeStore()
		key = idem.Key{Job: "daily", Period: idem.LastPeriod(day, time.Now()).Name}
		want := idem.StatusParked
		fn := func(context.Context) error { return idem.Permanent(errors.New("the input file is corrupt")) }
		if rerun {
			want, fn = idem.StatusDone, func(context.Context) error { return nil }
		}
		err = idem.RunOn(context.Background(), st, key, fn)
		if rec, ok, lerr := st.Lookup(context.Background(), key); lerr != nil || !ok || rec.Status != want {
			t.Fatalf("making %s %s: %v; record %+v, found %v, %v", key, want, err, rec, ok, lerr)
		}
	}
	mode := "reset"
	if rerun {
		mode = "rerun"
	}
	exits := make(chan idemtest.Exit, 3)
	for range 3 {
		c := idemtest.Start(t, dir+"|"+mode+"|"+arg, func(a string) {
			d, a, _ := strings.Cut(a, "|")
			mode, arg, _ := strings.Cut(a, "|")
			if err := wakeReplica(d, arg, open, mode == "rerun"); err != nil {
				fmt.Fprintln(os.Stderr, "replica:", err)
				os.Exit(1)
			}
		})
		go func() { exits <- c.Wait() }()
	}
	testwait.Until(t, func() bool { return strings.Count(readFile(logPath), "ready ") == 3 },
		"the three replicas to find %s %s (their log: %s)", key, map[bool]string{false: "parked", true: "done"}[rerun], logPath)
	reset := time.Now()
	if rerun {
		req := idem.RerunRequest{Keys: []idem.Key{key}, RequestID: "fix-1", Reason: "flow table corrected", By: "test"}
		for i, want := range []idem.RerunState{idem.RerunQueued, idem.RerunSeen} {
			out, err := idem.Rerun(context.Background(), st, req)
			if err != nil || len(out) != 1 || out[0].State != want || out[0].Revision != 1 {
				t.Fatalf("re-run request, sent %d times: %+v, %v; want %s, revision 1", i+1, out, err, want)
			}
		}
	} else if err := st.Resolve(context.Background(), key, idem.ResolveRetry); err != nil {
		t.Fatal(err)
	}
	ran := "ran " + key.Period + " "
	for !strings.Contains(readFile(logPath), ran) {
		if time.Since(reset) > WakeBound {
			rec, _, err := st.Lookup(context.Background(), key)
			t.Fatalf("no replica ran %s within %v of its %s (idem.SchedulerWakePoll %v): its record %+v (%v); the replicas' log:\n%s",
				key, WakeBound, mode, idem.SchedulerWakePoll, rec, err, readFile(logPath))
		}
		time.Sleep(10 * time.Millisecond) // a poll of the replicas' log
	}
	for _, line := range strings.Split(readFile(logPath), "\n") {
		if rest, ok := strings.CutPrefix(line, ran); ok {
			f := append(strings.Fields(rest), "", "")
			if ns, err := strconv.ParseInt(f[1], 10, 64); err == nil {
				t.Logf("%s ran %v after its %s", key, time.Unix(0, ns).Sub(reset), mode)
			}
		}
	}
	wantRev := int64(0)
	if rerun {
		wantRev = 1
	}
	testwait.Until(t, func() bool {
		rec, ok, err := st.Lookup(context.Background(), key)
		return err == nil && ok && rec.Status == idem.StatusDone && rec.Revision == wantRev
	}, "%s to be done at revision %d", key, wantRev)
	if err := os.WriteFile(stop, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		x := testwait.Recv(t, exits, "the replicas to stop")
		if x.Killed || x.Code != 0 {
			t.Errorf("a replica: killed %v, code %d\n%s", x.Killed, x.Code, x.Output)
		}
	}
	if n := strings.Count(readFile(logPath), ran); n != 1 {
		t.Errorf("%s ran %d times, want once; the replicas' log:\n%s", key, n, readFile(logPath))
	}
	if rev := fmt.Sprintf(" rev=%d\n", wantRev); !strings.Contains(readFile(logPath), rev) {
		t.Errorf("%s's run was not revision %d; the replicas' log:\n%s", key, wantRev, readFile(logPath))
	}
}

// wakeReplica is a child of WakeProcesses: a Scheduler with the daily
// job, on the wall clock, until the file stop appears. It logs "ready
// PID" once its job's catch-up found the period parked (with rerun, once
// its Scheduler runs), and "ran PERIOD PID UNIXNANO rev=REVISION" for each run of fn.
func wakeReplica(dir, arg string, open Opener, rerun bool) error {
	st, closeStore, err := open(context.Background(), arg)
	if err != nil {
		return err
	}
	defer closeStore()
	s := idem.NewScheduler(st)
	logPath := filepath.Join(dir, "fn.log")
	fn := func(ctx context.Context, p idem.Period) error {
		info, _ := idem.InfoFrom(ctx)
		appendLine(logPath, fmt.Sprintf("ran %s %d %d rev=%d", p.Name, os.Getpid(), time.Now().UnixNano(), info.Revision))
		return nil
	}
	if err := s.Add("daily", idem.Daily(time.UTC), fn); err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		parked := false
		for {
			if _, err := os.Stat(filepath.Join(dir, "stop")); err == nil {
				_ = s.Shutdown(ctx)
				return
			}
			j := s.Status().Jobs[0]
			if !parked && (rerun || j.Parked > 0) {
				parked = true
				appendLine(logPath, fmt.Sprintf("ready %d", os.Getpid()))
			}
			time.Sleep(5 * time.Millisecond) // a poll for the parent's signal
		}
	}()
	if err := s.Run(ctx); !errors.Is(err, idem.ErrSchedulerClosed) {
		return err
	}
	return nil
}
