package testwait

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// childEnv makes the test binary a child that hangs: "hang", or
// "hang-deaf" (it ignores SIGQUIT).
const childEnv = "TESTWAIT_CHILD"

func TestMain(m *testing.M) {
	switch os.Getenv(childEnv) {
	case "hang":
		fmt.Println("ready")
		hangForTest()
	case "hang-deaf":
		signal.Ignore(syscall.SIGQUIT)
		fmt.Println("ready")
		hangForTest()
	}
	os.Exit(m.Run())
}

func hangForTest() {
	for {
		time.Sleep(time.Hour)
	}
}

// child starts the test binary as a child of the given kind and returns
// once it is ready (it has its signal handling in place), with its stderr.
func child(t *testing.T, kind string) (*exec.Cmd, *bytes.Buffer) {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+kind)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ready := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(stdout).ReadString('\n')
		ready <- line
	}()
	if line := Recv(t, ready, "the child to be ready"); line != "ready\n" {
		t.Fatalf("child: %q", line)
	}
	return cmd, &stderr
}

// TestProcessQuitsStuckChild: a child still running at the limit is sent
// SIGQUIT and its goroutines end up in its stderr.
func TestProcessQuitsStuckChild(t *testing.T) {
	t.Parallel()
	cmd, stderr := child(t, "hang")
	err := Process(cmd, 100*time.Millisecond)
	var stuck *StuckError
	if !errors.As(err, &stuck) || stuck.Killed || !stuck.Waited {
		t.Fatalf("Process: %v, want a StuckError, waited for, without SIGKILL", err)
	}
	// The dump shows the child's main goroutine in TestMain: in hangForTest,
	// or, on a busy machine, still returning from writing "ready".
	for _, want := range []string{"SIGQUIT: quit", "testwait.TestMain"} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("child's stderr without %q:\n%s", want, stderr.String())
		}
	}
}

// TestProcessKillsDeafChild: a child that ignores SIGQUIT is sent SIGKILL
// the grace (QuitGrace; here 300 ms) later.
func TestProcessKillsDeafChild(t *testing.T) {
	t.Parallel()
	cmd, _ := child(t, "hang-deaf")
	err := process(cmd, 100*time.Millisecond, 300*time.Millisecond)
	var stuck *StuckError
	if !errors.As(err, &stuck) || !stuck.Killed || !stuck.Waited || !strings.Contains(err.Error(), "then SIGKILL 300ms later") {
		t.Fatalf("Process: %v, want a StuckError, sent SIGKILL, waited for", err)
	}
	if ws, _ := cmd.ProcessState.Sys().(syscall.WaitStatus); !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("the child ended with %v, want SIGKILL", cmd.ProcessState)
	}
}

// TestProcessExited: a child that exits in time gives cmd.Wait's error.
func TestProcessExited(t *testing.T) {
	t.Parallel()
	cmd := exec.Command("sh", "-c", "exit 3")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var ee *exec.ExitError
	if err := Process(cmd, Limit(t)); !errors.As(err, &ee) || ee.ExitCode() != 3 {
		t.Fatalf("Process: %v, want exit status 3", err)
	}
}

// fakeT records Fatalf instead of failing, and has a deadline of its own.
type fakeT struct {
	*testing.T
	deadline time.Time
	fatal    string
}

func (f *fakeT) Deadline() (time.Time, bool) { return f.deadline, !f.deadline.IsZero() }

func (f *fakeT) Fatalf(format string, args ...any) {
	f.fatal = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// run calls f in a goroutine of its own, as a test would (Fatalf ends it).
func (f *fakeT) run(fn func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn()
	}()
	<-done
}

func TestLimit(t *testing.T) {
	t.Parallel()
	if d := Limit(&fakeT{T: t}); d != Max {
		t.Errorf("without a deadline: %s, want %s", d, Max)
	}
	if d := Limit(&fakeT{T: t, deadline: time.Now().Add(time.Hour)}); d != Max {
		t.Errorf("an hour before the deadline: %s, want %s", d, Max)
	}
	if d := Limit(&fakeT{T: t, deadline: time.Now().Add(2 * time.Minute)}); d > 2*time.Minute-QuitGrace-5*time.Second {
		t.Errorf("2 min before the deadline: %s, want room for the report", d)
	}
	if d := Limit(&fakeT{T: t, deadline: time.Now().Add(time.Second)}); d != time.Second {
		t.Errorf("just before the deadline: %s, want the floor, 1s", d)
	}
}

// TestGiveUp: Recv, Group and Until fail the test after the limit, naming
// what they waited for, with the goroutines.
func TestGiveUp(t *testing.T) {
	t.Parallel()
	near := func() *fakeT { return &fakeT{T: t, deadline: time.Now().Add(time.Second)} } // the 1s floor
	var wg sync.WaitGroup
	wg.Add(1)
	defer wg.Done()
	for name, wait := range map[string]func(f *fakeT){
		"Recv":  func(f *fakeT) { Recv(f, make(chan int), "the %s", "answer") },
		"Group": func(f *fakeT) { Group(f, &wg, "the %s", "answer") },
		"Until": func(f *fakeT) { Until(f, func() bool { return false }, "the %s", "answer") },
	} {
		f := near()
		f.run(func() { wait(f) })
		if !strings.Contains(f.fatal, "waiting for the answer") || !strings.Contains(f.fatal, "goroutine ") {
			t.Errorf("%s: Fatalf %q, want what it waited for and the goroutines", name, f.fatal)
		}
	}
	f := near()
	ch := make(chan int, 1)
	ch <- 42
	if got := Recv(f, ch, "the answer"); got != 42 || f.fatal != "" {
		t.Errorf("Recv of a ready value: %d, %q", got, f.fatal)
	}
}
