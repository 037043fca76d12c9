package idem_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemstore"
	"github.com/idemgo/idem/internal/faultinj"
)

const (
	envGroupSyncDir = "IDEM_TEST_GROUPSYNC_DIR"
	groupSyncMarker = "GROUPSYNC-RESULT "
	groupSyncKeys   = 12
)

// TestLedgerGroupCommitFailedSync: the done marks of writes committed as
// one group share one fsync of the -wal file; when it fails, every one of
// them fails with an error naming the file and the cause, none reported
// done. With groupSyncKeys keys claimed, a child process holds the ledger's
// writes until all their done marks wait in its group, and lets them go,
// under strace with every fsync and fdatasync of the -wal file failing
// with EIO. The same child without the fault reports every one done, and
// a fresh handle finds them done.
func TestLedgerGroupCommitFailedSync(t *testing.T) {
	if dir := os.Getenv(envGroupSyncDir); dir != "" {
		groupSyncChild(t, dir)
		return
	}
	if err := faultinj.Available(); err != nil {
		t.Skipf("the failed sync is injected with strace: %v", err)
	}
	for _, fail := range []bool{false, true} {
		dir := t.TempDir()
		path := filepath.Join(dir, "ledger.db")
		// The ledger is created and the keys claimed here, not traced:
		// the child's first write is the group's.
		l, err := idem.OpenLedger(path)
		if err != nil {
			t.Fatal(err)
		}
		s, err := idemstore.Of(l)
		if err != nil {
			t.Fatal(err)
		}
		for i := range groupSyncKeys {
			c, err := s.Claim(context.Background(), idemstore.ClaimRequest{Key: groupSyncKey(i), Owner: "child", Now: time.Now(), Lease: time.Hour})
			if err != nil || c.State != idemstore.ClaimAcquired {
				t.Fatalf("claim %d: %+v, %v", i, c, err)
			}
		}
		l.Close()
		errs := groupSyncRun(t, dir, fail)
		for i, e := range errs {
			switch {
			case !fail && e != "":
				t.Errorf("no fault: done mark %d: %s", i, e)
			case fail && (!strings.Contains(e, path) || !strings.Contains(e, "fsync") || !strings.Contains(e, "I/O error")):
				t.Errorf("failed sync: done mark %d returned %q, want an error naming %s, the fsync and the I/O error", i, e, path)
			}
		}
		if fail {
			continue
		}
		l, err = idem.OpenLedger(path)
		if err != nil {
			t.Fatal(err)
		}
		for i := range groupSyncKeys {
			rec, ok, err := l.Lookup(context.Background(), groupSyncKey(i))
			if err != nil || !ok || rec.Status != idem.StatusDone {
				t.Errorf("%s: %v (found %v, %v), want done", groupSyncKey(i), rec.Status, ok, err)
			}
		}
		l.Close()
	}
}

func groupSyncKey(i int) idem.Key { return idem.Key{Job: "groupsync", Period: fmt.Sprintf("%02d", i)} }

// groupSyncRun runs the child under strace (every fsync and fdatasync of
// the -wal file failing with EIO when fail) and returns each done mark's
// error ("" for none).
func groupSyncRun(t *testing.T, dir string, fail bool) []string {
	t.Helper()
	wal := filepath.Join(dir, "ledger.db-wal")
	args := faultinj.Args(filepath.Join(dir, "strace.out"), []string{"fsync", "fdatasync"}, []string{wal}, nil,
		os.Args[0], "-test.run=^TestLedgerGroupCommitFailedSync$", "-test.count=1", "-test.timeout=2m")
	if fail {
		args = append([]string{"-e", "inject=fsync,fdatasync:error=EIO:when=1+"}, args...)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "strace", args...)
	cmd.Env = append(os.Environ(), envGroupSyncDir+"="+dir)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	werr := cmd.Run()
	i := strings.LastIndex(out.String(), groupSyncMarker)
	if i < 0 {
		t.Fatalf("child (fail=%v) gave no result (%v):\n%s", fail, werr, out.String())
	}
	line, _, _ := strings.Cut(out.String()[i+len(groupSyncMarker):], "\n")
	var errs []string
	if err := json.Unmarshal([]byte(line), &errs); err != nil || len(errs) != groupSyncKeys {
		t.Fatalf("child's result %q: %v", line, err)
	}
	return errs
}

// groupSyncChild holds the ledger's writes while their
// done marks gather in its group, lets them commit together and prints
// their errors.
func groupSyncChild(t *testing.T, dir string) {
	ctx := context.Background()
	l, err := idem.OpenLedger(filepath.Join(dir, "ledger.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	s, err := idemstore.Of(l)
	if err != nil {
		t.Fatal(err)
	}
	release := idem.LedgerHoldWrites(l)
	errs := make([]error, groupSyncKeys)
	done := make(chan int)
	for i := range groupSyncKeys {
		go func() {
			errs[i] = s.Finish(ctx, groupSyncKey(i), 1, idemstore.End{Status: idem.StatusDone, Now: time.Now()})
			done <- i
		}()
	}
	deadline := time.Now().Add(time.Minute)
	for idem.LedgerGroupPending(l) < groupSyncKeys {
		if time.Now().After(deadline) {
			t.Fatalf("waited a minute for %d done marks to wait in the ledger's group; %d do", groupSyncKeys, idem.LedgerGroupPending(l))
		}
		time.Sleep(time.Millisecond)
	}
	release()
	out := make([]string, groupSyncKeys)
	for range groupSyncKeys {
		i := <-done
		if errs[i] != nil {
			out[i] = errs[i].Error()
		}
	}
	b, _ := json.Marshal(out)
	fmt.Printf("\n%s%s\n", groupSyncMarker, b)
}
