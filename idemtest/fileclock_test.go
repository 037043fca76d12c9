package idemtest

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idemgo/idem/internal/testwait"
)

// TestFileClockAcrossProcesses: a child process started with a FileClock
// reads the time the parent wrote, and its After fires once the parent
// has moved the time past it (the child says so, then exits).
func TestFileClockAcrossProcesses(t *testing.T) {
	day := time.Date(2026, 10, 31, 23, 0, 0, 0, time.UTC)
	if IsChild(t) {
		Start(t, "", func(path string) { // does not return
			c := FileClock{Path: path}
			fmt.Println("read", c.Now().Format(time.RFC3339))
			timer := c.After(2 * time.Hour)
			if err := os.WriteFile(path+".ready", nil, 0o644); err != nil {
				panic(err)
			}
			fmt.Println("fired", (<-timer).Format(time.RFC3339))
		})
	}
	path := filepath.Join(t.TempDir(), "clock")
	SetFileClock(t, path, day)
	c := Start(t, path, nil)
	// Once the child waits for its timer, move the clock an hour (not
	// enough), then a day.
	testwait.Until(t, func() bool { _, err := os.Stat(path + ".ready"); return err == nil }, "the child to set its timer")
	SetFileClock(t, path, day.Add(time.Hour))
	SetFileClock(t, path, day.Add(24*time.Hour))
	e := c.Wait()
	if e.Code != 0 || e.Killed {
		t.Fatalf("child: %+v", e)
	}
	if !strings.Contains(e.Output, "read 2026-10-31T23:00:00Z") || !strings.Contains(e.Output, "fired 2026-11-01T23:00:00Z") {
		t.Errorf("the child's output: %q", e.Output)
	}
	if got := (FileClock{Path: path}).Now(); !got.Equal(day.Add(24 * time.Hour)) {
		t.Errorf("Now = %v", got)
	}
}
