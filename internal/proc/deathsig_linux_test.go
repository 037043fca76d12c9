package proc

import (
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/idemgo/idem/internal/testwait"
)

// TestDieWithParent: a child started with DieWithParent dies when its
// parent is killed.
func TestDieWithParent(t *testing.T) {
	middle := child("middle")
	line := started(t, middle)
	pid, err := strconv.Atoi(line)
	if err != nil {
		t.Fatalf("the middle process said %q, want its child's pid", line)
	}
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
	start := procStart(pid)
	if start == "" {
		t.Fatalf("the grandchild (pid %d) is not running", pid)
	}
	if err := Kill(middle.Process); err != nil {
		t.Fatal(err)
	}
	if ps := ended(t, middle); !Killed(ps) {
		t.Fatalf("the middle process: %v", ps)
	}
	testwait.Until(t, func() bool { return procStart(pid) != start },
		"the grandchild (pid %d) to die with its parent", pid)
}

// procStart is the start time of the live process pid (field 22 of
// /proc/pid/stat), or "" if there is none, or only its zombie.
func procStart(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return ""
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:]) // after the command's name: state is f[0], start time f[19]
	if len(f) < 20 || f[0] == "Z" {
		return ""
	}
	return f[19]
}
