package proc

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/idemgo/idem/internal/testwait"
)

// envChild tells a re-executed test binary what to do instead of testing.
const envChild = "PROC_TEST_CHILD"

func TestMain(m *testing.M) {
	switch os.Getenv(envChild) {
	case "":
		os.Exit(m.Run())
	case "exit3":
		os.Exit(3)
	case "killself":
		KillSelf()
		sleepForever()
	case "sleep":
		fmt.Println("ready")
		sleepForever()
	case "middle": // starts a sleeping grandchild that dies with it
		g := child("sleep")
		g.Stdout = nil
		if !DieWithParent(g) {
			fmt.Println("no-deathsig")
			os.Exit(0)
		}
		if err := g.Start(); err != nil {
			fmt.Println("start:", err)
			os.Exit(1)
		}
		fmt.Println(g.Process.Pid)
		sleepForever()
	}
	os.Exit(2)
}

func sleepForever() {
	for {
		time.Sleep(time.Hour)
	}
}

// child is this test binary, to be re-executed doing what.
func child(what string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envChild+"="+what)
	return cmd
}

// started starts cmd and returns the first line it prints.
func started(t *testing.T, cmd *exec.Cmd) string {
	t.Helper()
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	lines := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(out).ReadString('\n')
		lines <- strings.TrimSpace(line)
	}()
	return testwait.Recv(t, lines, "the first line of %s", cmd.Env[len(cmd.Env)-1])
}

// ended waits for cmd to end and returns how.
func ended(t *testing.T, cmd *exec.Cmd) *os.ProcessState {
	t.Helper()
	err := testwait.Process(cmd, testwait.Limit(t))
	var stuck *testwait.StuckError
	if errors.As(err, &stuck) {
		t.Fatalf("%s: %v", cmd.Env[len(cmd.Env)-1], err)
	}
	return cmd.ProcessState
}

// TestKilled: a process killed by Kill, or by KillSelf, is Killed; one that
// exits, with any code, is not.
func TestKilled(t *testing.T) {
	t.Run("Kill", func(t *testing.T) {
		cmd := child("sleep")
		if line := started(t, cmd); line != "ready" {
			t.Fatalf("child said %q", line)
		}
		if err := Kill(cmd.Process); err != nil {
			t.Fatal(err)
		}
		if ps := ended(t, cmd); !Killed(ps) {
			t.Fatalf("a child killed by Kill: %v, not Killed", ps)
		}
	})
	t.Run("KillSelf", func(t *testing.T) {
		cmd := child("killself")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		if ps := ended(t, cmd); !Killed(ps) {
			t.Fatalf("a child that called KillSelf: %v, not Killed", ps)
		}
	})
	t.Run("exit", func(t *testing.T) {
		cmd := child("exit3")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		if ps := ended(t, cmd); Killed(ps) || ps.ExitCode() != 3 {
			t.Fatalf("a child that exited 3: %v, Killed %v", ps, Killed(ps))
		}
	})
}
