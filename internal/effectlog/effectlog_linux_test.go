package effectlog_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/idemgo/idem/internal/effectlog"
)

const (
	childEnv = "IDEM_EFFECTLOG_CHILD"
	bigLine  = 4 << 20 // a record's bytes, written in one write
	// maxRecords bounds what a child writes if no kill comes (its parent
	// died, or every kill missed): 256 MiB, then it exits.
	maxRecords = 64
)

// TestKilledInAWrite: a real SIGKILL in the middle of a write. A child
// process appends records of 4 MiB, one write each, until it is killed
// (or dies with this process, or has written maxRecords);
// Linux leaves the write it was in cut at a page boundary (the test tries
// until a kill has done so: the log's size is not a whole number of
// records), killing it when it has seen the log hold part of a record.
// Then a record is appended after the torn one, and Counts
// finds every whole record and that one, and nothing else.
func TestKilledInAWrite(t *testing.T) {
	if path := os.Getenv(childEnv); path != "" {
		f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
		if err != nil {
			panic(err)
		}
		line := strings.Repeat("x", bigLine)
		for range maxRecords {
			if err := effectlog.Append(f, line); err != nil {
				panic(err)
			}
		}
		os.Exit(0)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	const record = bigLine + 2
	dir := t.TempDir()
	deadline := time.Now().Add(time.Minute)
	for try := 1; ; try++ {
		path := filepath.Join(dir, "effects.log")
		os.Remove(path)
		cmd := exec.Command(exe, "-test.run=^TestKilledInAWrite$")
		cmd.Env = append(os.Environ(), childEnv+"="+path)
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		// Kill once the log holds a record and part of the next: the
		// child is in the middle of a write.
		for st, err := os.Stat(path); err != nil || st.Size() < record || st.Size()%record == 0; st, err = os.Stat(path) {
			if time.Now().After(deadline) {
				cmd.Process.Kill()
				cmd.Wait()
				t.Fatalf("waited a minute for the child to be in the middle of a write to %s, after a first record", path)
			}
			time.Sleep(time.Millisecond)
		}
		cmd.Process.Kill()
		cmd.Wait()
		st, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if st.Size()%record == 0 {
			// The kill fell between two writes: try again.
			if time.Now().After(deadline) {
				t.Fatalf("%d kills in a minute, none in a write (the log's size a whole number of records every time)", try)
			}
			continue
		}
		whole := int(st.Size() / record)
		t.Logf("try %d: the kill left %d whole records and %d bytes of a torn one", try, whole, st.Size()%record)
		if err := appendRecord(path, "after"); err != nil {
			t.Fatal(err)
		}
		counts, err := effectlog.Counts(path)
		if err != nil {
			t.Fatal(err)
		}
		if len(counts) != 2 || counts["after"] != 1 || counts[strings.Repeat("x", bigLine)] != whole {
			n := map[int]int{}
			for l, c := range counts {
				n[len(l)] += c
			}
			t.Fatalf("records by length: %v; want %d of %d bytes and one of 5", n, whole, bigLine)
		}
		return
	}
}
