// Package faultinj runs a command under strace with one system call failing
// at one occurrence (strace -e inject=), and reads back the calls strace saw
// and which of them it made fail. The fault-injection tests of the stores
// (faultinject_linux_test.go) and of the command line use it.
//
// strace counts a call's occurrences per thread, and only among the calls on
// the paths given with -P: "when=N" fails the N-th such call of every thread
// that makes N of them. A child that locks the goroutine doing the file work
// to its thread (runtime.LockOSThread) makes the count that of the operation.
package faultinj

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Available returns nil if strace is installed and may trace a child here,
// else why not.
func Available() error {
	path, err := exec.LookPath("strace")
	if err != nil {
		return fmt.Errorf("strace is not installed (apt-get install strace): %w", err)
	}
	out, err := exec.Command(path, "-f", "-qq", "-o", "/dev/null", "-e", "trace=fsync", "true").CombinedOutput()
	if err != nil {
		return fmt.Errorf("strace cannot trace here (ptrace refused?): %v: %s", err, out)
	}
	return nil
}

// Injection is one fault: the When-th call of Syscall (on the traced paths,
// in a thread) fails with Errno (a name: "EIO").
type Injection struct {
	Syscall string
	Errno   string
	When    int
}

func (i Injection) String() string { return fmt.Sprintf("%s:%s:when=%d", i.Syscall, i.Errno, i.When) }

// Args returns the arguments of strace that trace syscalls on paths into
// out (with thread ids, times and the paths of file descriptors), failing
// inj if it is not nil, followed by the command to run.
func Args(out string, syscalls, paths []string, inj *Injection, command ...string) []string {
	args := []string{"-f", "-qq", "--seccomp-bpf", "-ttt", "-y", "-o", out,
		"-e", "trace=" + strings.Join(syscalls, ",")}
	if inj != nil {
		args = append(args, "-e", fmt.Sprintf("inject=%s:error=%s:when=%d", inj.Syscall, inj.Errno, inj.When))
	}
	for _, p := range paths {
		args = append(args, "-P", p)
	}
	return append(append(args, "--"), command...)
}

// Call is one system call in strace's output.
type Call struct {
	TID      int
	Time     time.Time
	Syscall  string
	Args     string   // as strace printed them
	Paths    []string // the paths in the arguments: file descriptors' (-y) and strings
	Ret      string   // what it returned, as strace printed it: "0", "-1 EIO (Input/output error)"
	Injected bool     // strace made it fail
}

func (c Call) String() string {
	s := fmt.Sprintf("[%d] %s(%s) = %s", c.TID, c.Syscall, c.Args, c.Ret)
	if c.Injected {
		s += " (INJECTED)"
	}
	return s
}

var (
	lineRE     = regexp.MustCompile(`^(\d+)\s+(\d+\.\d+)\s+(.*)$`)
	callRE     = regexp.MustCompile(`^(\w+)\((.*)$`)
	resumedRE  = regexp.MustCompile(`^<\.\.\. (\w+) resumed>(.*)$`)
	fdPathRE   = regexp.MustCompile(`\d+<([^<>]*)>`)
	strPathRE  = regexp.MustCompile(`"((?:[^"\\]|\\.)*)"`)
	unfinished = " <unfinished ...>"
)

// Parse reads strace's output file (written with Args).
func Parse(path string) ([]Call, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var calls []Call
	pending := map[int]Call{} // unfinished, by thread
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		m := lineRE.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		tid, _ := strconv.Atoi(m[1])
		sec, frac, _ := strings.Cut(m[2], ".")
		s, _ := strconv.ParseInt(sec, 10, 64)
		us, _ := strconv.ParseInt((frac + "000000")[:6], 10, 64)
		rest := m[3]
		if strings.HasPrefix(rest, "---") || strings.HasPrefix(rest, "+++") {
			continue // a signal, an exit
		}
		var c Call
		if r := resumedRE.FindStringSubmatch(rest); r != nil {
			p, ok := pending[tid]
			if !ok {
				continue
			}
			delete(pending, tid)
			c = p
			rest = c.Syscall + "(" + c.Args + r[2]
		} else {
			c.Time = time.Unix(s, us*1000)
		}
		c.TID = tid
		if strings.HasSuffix(rest, unfinished) {
			cm := callRE.FindStringSubmatch(strings.TrimSuffix(rest, unfinished))
			if cm != nil {
				c.Syscall, c.Args = cm[1], cm[2]
				pending[tid] = c
			}
			continue
		}
		cm := callRE.FindStringSubmatch(rest)
		if cm == nil {
			continue
		}
		c.Syscall = cm[1]
		body := cm[2]
		i := strings.LastIndex(body, ") = ")
		if i < 0 {
			continue
		}
		c.Args, c.Ret = body[:i], body[i+len(") = "):]
		if strings.HasSuffix(c.Ret, " (INJECTED)") {
			c.Injected = true
			c.Ret = strings.TrimSuffix(c.Ret, " (INJECTED)")
		}
		for _, p := range fdPathRE.FindAllStringSubmatch(c.Args, -1) {
			c.Paths = append(c.Paths, p[1])
		}
		for _, p := range strPathRE.FindAllStringSubmatch(c.Args, -1) {
			if strings.HasPrefix(p[1], "/") {
				c.Paths = append(c.Paths, p[1])
			}
		}
		calls = append(calls, c)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(calls) == 0 && len(pending) > 0 {
		return nil, errors.New("faultinj: only unfinished calls in " + path)
	}
	return calls, nil
}
