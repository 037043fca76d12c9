// Command dailyreport sends a daily report mail at most once per day, with
// no database: idem keeps a JSON state file, and a TwoPhase check asks the
// mail gateway "do you already have request X?" when a run died between
// sending and marking.
//
//	go run ./examples/dailyreport
//
// The gateway here is a directory (an outbox) with one file per accepted
// request id, so it survives the process that is killed mid-send.
//
// The kill is a SIGKILL, which Windows does not have: there the child ends
// with exit status 1, and the demo stops at that step (it cannot tell the
// kill from a failure).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/idemgo/idem"
)

const childEnv = "DAILYREPORT_CHILD_DIR"

// gateway is a fake mail gateway that deduplicates nothing by itself but
// can be asked whether it accepted a request id.
type gateway struct{ dir string }

// Send accepts a mail; the request id names it.
func (g gateway) Send(ctx context.Context, requestID, body string) error {
	f, err := os.OpenFile(filepath.Join(g.dir, requestID+".eml"), os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.WriteString(body); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// Has answers the two-phase question: did the gateway get key's request?
func (g gateway) Has(ctx context.Context, key idem.Key) (bool, error) {
	_, err := os.Stat(filepath.Join(g.dir, key.RequestID()+".eml"))
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	return err == nil, err
}

func (g gateway) outbox() []string {
	entries, _ := os.ReadDir(g.dir)
	var mails []string
	for _, e := range entries {
		b, _ := os.ReadFile(filepath.Join(g.dir, e.Name()))
		mails = append(mails, strings.TrimSpace(string(b)))
	}
	sort.Strings(mails)
	return mails
}

type app struct {
	state *idem.StateFile
	gw    gateway
}

func open(dir string) (*app, error) {
	gw := gateway{filepath.Join(dir, "outbox")}
	if err := os.MkdirAll(gw.dir, 0o755); err != nil {
		return nil, err
	}
	s, err := idem.OpenStateFile(filepath.Join(dir, "report-state.json"))
	if err != nil {
		return nil, err
	}
	return &app{state: s, gw: gw}, nil
}

// report is the job: send the report of one day.
func (a *app) report(ctx context.Context, day string, afterSend func()) (idem.Result, error) {
	var res idem.Result
	key := idem.Key{Job: "daily_report", Period: day}
	err := a.state.Run(ctx, key, func(ctx context.Context) error {
		info, _ := idem.InfoFrom(ctx)
		if err := a.gw.Send(ctx, info.RequestID, "report for "+day); err != nil {
			return err
		}
		if afterSend != nil {
			afterSend()
		}
		return nil
	}, idem.TwoPhase(a.gw.Has), idem.ReportTo(&res))
	return res, err
}

func main() {
	dirFlag := flag.String("dir", "", "keep the state file and outbox in this directory (default: a temporary one, removed at exit)")
	flag.Parse()
	log.SetFlags(0)
	if dir := os.Getenv(childEnv); dir != "" {
		child(dir)
		return
	}
	dir := *dirFlag
	if dir == "" {
		tmp, err := os.MkdirTemp("", "idem-dailyreport-")
		if err != nil {
			log.Fatal(err)
		}
		defer os.RemoveAll(tmp)
		dir = tmp
	}
	if err := demo(context.Background(), dir); err != nil {
		log.Fatal(err)
	}
}

// demo runs the demonstration in dir. When ctx ends while the child runs,
// the child is sent SIGQUIT (it prints its goroutines to stderr), then
// killed 10 s later.
func demo(ctx context.Context, dir string) error {
	a, err := open(dir)
	if err != nil {
		return err
	}
	fmt.Printf("state file: %s\noutbox:     %s\n\n", a.state.Path(), a.gw.dir)

	fmt.Println("step 1: the 08:00 timer fires for 2026-10-27")
	res, err := a.report(ctx, "2026-10-27", nil)
	if err != nil {
		return err
	}
	fmt.Printf("        -> %s; outbox %q\n", res.Outcome, a.gw.outbox())

	fmt.Println("step 2: the timer fires again for 2026-10-27 (a catch-up after a reboot)")
	if res, err = a.report(ctx, "2026-10-27", nil); err != nil {
		return err
	}
	fmt.Printf("        -> %s; no second mail; outbox %q\n", res.Outcome, a.gw.outbox())

	fmt.Println("step 3: the run for 2026-10-28 sends its mail and is killed (SIGKILL) before marking it sent")
	cmd := exec.CommandContext(ctx, os.Args[0])
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGQUIT) }
	cmd.WaitDelay = 10 * time.Second
	cmd.Env = append(os.Environ(), childEnv+"="+dir)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	err = cmd.Run()
	var ee *exec.ExitError
	if ctx.Err() != nil {
		return fmt.Errorf("the child did not end: %w (sent SIGQUIT: its goroutines are on stderr); %v", context.Cause(ctx), err)
	}
	if !errors.As(err, &ee) || !ee.Sys().(syscall.WaitStatus).Signaled() {
		return fmt.Errorf("the child was not killed: %v", err)
	}
	rec, _, err := a.state.Lookup(ctx, idem.Key{Job: "daily_report", Period: "2026-10-28"})
	if err != nil {
		return err
	}
	fmt.Printf("        -> child %s; state file: 2026-10-28 is %s (attempt %d); outbox %q\n", ee, rec.Status, rec.Attempt, a.gw.outbox())

	fmt.Println("step 4: the next trigger finds the dead attempt and asks the gateway instead of guessing")
	if res, err = a.report(ctx, "2026-10-28", nil); err != nil {
		return err
	}
	fmt.Printf("        -> %s: the gateway had the request, so nothing was sent again; outbox %q\n", res.Outcome, a.gw.outbox())

	fmt.Println("step 5: triggered once more")
	if res, err = a.report(ctx, "2026-10-28", nil); err != nil {
		return err
	}
	fmt.Printf("        -> %s\n\none mail per day.\n", res.Outcome)
	return nil
}

// child sends the 2026-10-28 report and dies right after the gateway
// accepted it, before idem's done mark.
func child(dir string) {
	a, err := open(dir)
	if err != nil {
		log.Fatal(err)
	}
	_, _ = a.report(context.Background(), "2026-10-28", func() {
		fmt.Println("        (child: the gateway accepted the mail; now killed before the done mark)")
		self, _ := os.FindProcess(os.Getpid())
		_ = self.Kill() // SIGKILL
		select {}
	})
}
