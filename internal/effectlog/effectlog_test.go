package effectlog_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/idemgo/idem/internal/effectlog"
)

// TestTornRecordDropped: a record cut short (its first bytes only, as a
// SIGKILL in its write leaves it) is not counted, and the record written
// after it is, whole, by Counts, by Lines and by a Reader that read the
// log before, between and after the writes.
func TestTornRecordDropped(t *testing.T) {
	path := filepath.Join(t.TempDir(), "effects.log")
	r := effectlog.NewReader(path)
	if n, err := r.Count("acct-000001"); err != nil || n != 0 {
		t.Fatalf("Count on a log not yet created: %d, %v", n, err)
	}
	for _, l := range []string{"acct-000001", "acct-000002"} {
		if err := appendRecord(path, l); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := r.Count("acct-000002"); err != nil || n != 1 {
		t.Fatalf("Count(acct-000002) = %d, %v; want 1", n, err)
	}
	// A torn record: the first 7 bytes of "\x1eacct-000003\n".
	appendRaw(t, path, "\x1eacct-0")
	if n, err := r.Count("acct-0"); err != nil || n != 0 {
		t.Fatalf("Count of the torn record's text = %d, %v; want 0", n, err)
	}
	for _, l := range []string{"acct-000004", "acct-000003"} {
		if err := appendRecord(path, l); err != nil {
			t.Fatal(err)
		}
	}
	want := []string{"acct-000001", "acct-000002", "acct-000004", "acct-000003"}
	for _, l := range want {
		if n, err := r.Count(l); err != nil || n != 1 {
			t.Fatalf("Reader: Count(%s) = %d, %v; want 1", l, n, err)
		}
	}
	got, err := effectlog.Lines(path)
	if err != nil || strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("Lines = %q, %v; want %q", got, err, want)
	}
	counts, err := effectlog.Counts(path)
	if err != nil || len(counts) != len(want) {
		t.Fatalf("Counts = %v, %v; want each of %q once", counts, err, want)
	}
}

// TestNotARecord: a line written without Append is an error naming the
// log and the line, not a record, but to CountsMixed; Append refuses a
// line with a newline.
func TestNotARecord(t *testing.T) {
	path := filepath.Join(t.TempDir(), "effects.log")
	if err := appendRecord(path, "acct-000001"); err != nil {
		t.Fatal(err)
	}
	appendRaw(t, path, "acct-000002\n")
	if _, err := effectlog.Counts(path); err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "acct-000002") {
		t.Fatalf("Counts of a log with a plain line: %v; want an error naming %s and the line", err, path)
	}
	if err := appendRecord(path, "two\nlines"); err == nil {
		t.Fatal("Append of a line with a newline: no error")
	}
	// CountsMixed takes it as a record whole.
	if err := appendRecord(path, "acct-000003"); err != nil {
		t.Fatal(err)
	}
	counts, err := effectlog.CountsMixed(path)
	if err != nil || len(counts) != 3 || counts["acct-000001"] != 1 || counts["acct-000002"] != 1 || counts["acct-000003"] != 1 {
		t.Fatalf("CountsMixed = %v, %v; want acct-000001, -2 and -3 once each", counts, err)
	}
}

// appendRecord appends line to the log at path (created if missing) with
// effectlog.Append.
func appendRecord(path, line string) error {
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	err = effectlog.Append(f, line)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

func appendRaw(t *testing.T, path, s string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(s); err != nil {
		t.Fatal(err)
	}
}
