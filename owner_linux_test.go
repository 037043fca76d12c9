package idem_test

import (
	"bytes"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/idemgo/idem/idemstore"
)

// TestHolderGone checks the predicate against real processes: this one, a
// child that runs, a child that is a zombie, and a child that was reaped.
func TestHolderGone(t *testing.T) {
	t.Parallel()
	me := idemstore.Owner()
	head, _, ok := strings.Cut(me, ";")
	if !ok {
		t.Fatalf("this process's owner %q has no scope: /proc unreadable?", me)
	}
	if want := ":" + strconv.Itoa(os.Getpid()) + ":"; !strings.Contains(head, want) {
		t.Fatalf("owner %q does not name pid %d", me, os.Getpid())
	}
	field := func(owner, name string) string {
		for _, f := range strings.Split(owner, ";")[1:] {
			if v, ok := strings.CutPrefix(f, name+"="); ok {
				return v
			}
		}
		t.Fatalf("owner %q has no %s", owner, name)
		return ""
	}
	with := func(owner, name, value string) string {
		return strings.Replace(owner, ";"+name+"="+field(owner, name), ";"+name+"="+value, 1)
	}
	hostPart := head[:strings.LastIndexByte(head[:strings.LastIndexByte(head, ':')], ':')]
	start, err := strconv.ParseUint(field(me, "start"), 10, 64)
	if err != nil {
		t.Fatal(err)
	}

	// A real child: its owner is this process's, with its pid and start.
	child := exec.Command("sleep", "600")
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = child.Process.Kill(); _, _ = child.Process.Wait() })
	pid := child.Process.Pid
	childStart := procStart(t, pid)
	childOwner := strings.Replace(me, ":"+strconv.Itoa(os.Getpid())+":", ":"+strconv.Itoa(pid)+":", 1)
	childOwner = with(childOwner, "start", strconv.FormatUint(childStart, 10))

	for _, c := range []struct {
		name  string
		owner string
		gone  bool
	}{
		{"this process", me, false},
		{"this pid, started at another time (a reused pid)", with(me, "start", strconv.FormatUint(start+1, 10)), true},
		{"this process on another host", "elsewhere.example" + me[len(hostPart):], false},
		{"this pid after another boot", with(me, "boot", "00000000-0000-0000-0000-000000000000"), false},
		{"this pid in another pid namespace", with(me, "pidns", "1"), false},
		{"this pid in another time namespace", with(me, "timens", "1"), false},
		{"this pid started at another time, on another host", "elsewhere.example" + with(me, "start", "1")[len(hostPart):], false},
		{"an owner of an older idem (no scope)", head, false},
		{"a running child", childOwner, false},
		{"a running child, started at another time", with(childOwner, "start", strconv.FormatUint(childStart+1, 10)), true},
		{"pid 0", strings.Replace(me, ":"+strconv.Itoa(os.Getpid())+":", ":0:", 1), false},
		{"pid -1", strings.Replace(me, ":"+strconv.Itoa(os.Getpid())+":", ":-1:", 1), false},
		{"a field this version does not know", me + ";cgroup=x", false},
		{"a field twice", me + ";boot=" + field(me, "boot"), false},
		{"no start", strings.Replace(me, ";start="+field(me, "start"), "", 1), false},
		{"empty", "", false},
	} {
		if got := idemstore.HolderGone(c.owner); got != c.gone {
			t.Errorf("%s: HolderGone(%q) = %v, want %v", c.name, c.owner, got, c.gone)
		}
	}

	// Killed but not reaped: a zombie has ended.
	if err := child.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for procState(t, pid) != 'Z' {
		if time.Now().After(deadline) {
			t.Fatalf("child %d is not a zombie 10s after SIGKILL: state %c", pid, procState(t, pid))
		}
		time.Sleep(time.Millisecond)
	}
	if !idemstore.HolderGone(childOwner) {
		t.Errorf("zombie child: HolderGone(%q) = false, want true", childOwner)
	}
	// Reaped: no such process.
	_, _ = child.Process.Wait()
	if !idemstore.HolderGone(childOwner) {
		t.Errorf("reaped child: HolderGone(%q) = false, want true", childOwner)
	}
}

// procStat returns the fields of /proc/<pid>/stat after the command name.
func procStat(t *testing.T, pid int) []string {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		t.Fatal(err)
	}
	return strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
}

func procStart(t *testing.T, pid int) uint64 {
	t.Helper()
	v, err := strconv.ParseUint(procStat(t, pid)[19], 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func procState(t *testing.T, pid int) byte { t.Helper(); return procStat(t, pid)[0][0] }
