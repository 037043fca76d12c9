package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/idemgo/idem/internal/testns"
)

const envDiskFullDir = "IDEM_TEST_CLI_DISKFULL_DIR"

// TestRunAndDoctorOnAFullDisk puts a ledger on a real tmpfs of 2 MiB and
// fills it: `idem run` exits 7 (the store cannot be written, not 2, the
// usage code) saying "no space left on device" and naming the ledger, and
// runs nothing; `idem doctor` says the disk is full, not to check
// permissions; once space is freed the next `idem run` does the period.
// Then the tmpfs is made read-only: `idem run` exits 7 saying so, and
// doctor says the directory is not writable.
// The child mounts the tmpfs in a user and mount namespace of its own.
func TestRunAndDoctorOnAFullDisk(t *testing.T) {
	if dir := os.Getenv(envDiskFullDir); dir != "" {
		diskFullChild(t, dir)
		return
	}
	testns.Run(t, envDiskFullDir)
}

func diskFullChild(t *testing.T, dir string) {
	testns.MountTmpfs(t, dir, "2m")
	ledger := filepath.Join(dir, "ledger.db")
	marks := filepath.Join(t.TempDir(), "marks") // off the tmpfs
	run := func(job string) (int, string) {
		var out, errb bytes.Buffer
		code := execute([]string{"run", "--ledger", ledger, "--job", job, "--schedule", "daily", "--tz", "UTC",
			"--", "sh", "-c", "echo $IDEM_JOB $IDEM_PERIOD >> " + marks}, &out, &errb)
		return code, errb.String()
	}
	if code, stderr := run("first"); code != exitOK {
		t.Fatalf("idem run on an empty tmpfs: exit %d: %s", code, stderr)
	}
	filler := filepath.Join(dir, "filler")
	f, err := os.Create(filler)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4096)
	for {
		if _, err := f.Write(buf); err != nil {
			break
		}
	}
	f.Close()

	code, stderr := run("second")
	if code != exitStore || !strings.Contains(stderr, "no space left on device") || !strings.Contains(stderr, ledger) {
		t.Errorf("idem run on a full tmpfs: exit %d, want %d saying \"no space left on device\" and naming %s; stderr:\n%s", code, exitStore, ledger, stderr)
	}
	if b, _ := os.ReadFile(marks); strings.Contains(string(b), "second") {
		t.Errorf("idem run on a full tmpfs ran the command: %s", b)
	}
	var out, errb bytes.Buffer
	dcode := execute([]string{"doctor", ledger}, &out, &errb)
	report := out.String() + errb.String()
	if dcode == exitOK || !strings.Contains(report, "no space left on device") || strings.Contains(report, "Check its permissions") {
		t.Errorf("idem doctor on a full tmpfs: exit %d, want a failure saying \"no space left on device\" and not blaming permissions:\n%s", dcode, report)
	}
	os.Remove(filler)
	if code, stderr := run("second"); code != exitOK {
		t.Errorf("idem run once space is freed: exit %d: %s", code, stderr)
	}
	if b, _ := os.ReadFile(marks); strings.Count(string(b), "second") != 1 {
		t.Errorf("once space is freed the period ran %d times, want once:\n%s", strings.Count(string(b), "second"), b)
	}

	// Read-only.
	if err := syscall.Mount("", dir, "", syscall.MS_REMOUNT|syscall.MS_RDONLY, ""); err != nil {
		t.Fatalf("remount read-only: %v", err)
	}
	code, stderr = run("third")
	if code != exitStore || !strings.Contains(stderr, "read-only") || !strings.Contains(stderr, dir) {
		t.Errorf("idem run on a read-only tmpfs: exit %d, want %d saying read-only and naming %s; stderr:\n%s", code, exitStore, dir, stderr)
	}
	if b, _ := os.ReadFile(marks); strings.Contains(string(b), "third") {
		t.Errorf("idem run on a read-only tmpfs ran the command: %s", b)
	}
	out.Reset()
	errb.Reset()
	execute([]string{"doctor", ledger}, &out, &errb)
	if report := out.String() + errb.String(); !strings.Contains(report, "not writable") {
		t.Errorf("idem doctor on a read-only tmpfs does not say the directory is not writable:\n%s", report)
	}
}
