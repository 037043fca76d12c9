package idem_test

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemtest"
)

// TestStateFileLease proves what StateFile's doc says of the lease: the
// lock never expires while its holder lives (another Run finds the job in
// progress however late it comes), but WithLease is how long a stall may
// last before CheckLease refuses; and the stalled attempt's done mark is
// still written when fn returns nil.
func TestStateFileLease(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	s := openState(t, dir)
	k := idem.Key{Job: "report", Period: "2026-10-27"}
	clk := stalledClock{idemtest.NewClock(t0)}
	const lease = time.Minute
	var before, after, othersErr error
	var res idem.Result
	err := s.Run(ctx, k, func(fctx context.Context) error {
		before = idem.CheckLease(fctx)
		clk.Advance(lease + time.Second) // stalled past the lease: no renewal ran
		after = idem.CheckLease(fctx)
		// Another process (another store on the file), a day later by its
		// clock; its context is not derived from fn's.
		othersErr = openState(t, dir).Run(ctx, k, func(context.Context) error {
			t.Error("another store took the stalled holder's job over")
			return nil
		}, idem.WithClock(idemtest.NewClock(t0.Add(24*time.Hour))), idem.WithLease(lease))
		return nil
	}, idem.WithClock(clk), idem.WithLease(lease), idem.ReportTo(&res))
	if before != nil {
		t.Errorf("CheckLease within the lease: %v", before)
	}
	if !errors.Is(after, idem.ErrLeaseLost) {
		t.Errorf("CheckLease after a stall longer than the lease: %v, want ErrLeaseLost", after)
	}
	if !errors.Is(othersErr, idem.ErrInProgress) {
		t.Errorf("another Run while the stalled holder lives: %v, want ErrInProgress", othersErr)
	}
	if err != nil || res.Outcome != idem.Ran {
		t.Errorf("the stalled attempt's Run: %v, outcome %v; want its done mark written", err, res.Outcome)
	}
	if rec, ok, err := s.Lookup(ctx, k); err != nil || !ok || rec.Status != idem.StatusDone {
		t.Errorf("record %+v, %v, %v; want done", rec, ok, err)
	}
}

// TestReadmeGoSnippets: every Go block of README.md is code that compiles
// and runs: it appears, line for line (at any indentation), in a .go file
// of the repository, whose tests run it.
func TestReadmeGoSnippets(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	var sources []string
	err = filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(path, ".go") {
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			sources = append(sources, path+"\n"+string(b))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	blocks := goBlocks(string(readme))
	if len(blocks) == 0 {
		t.Fatal("no Go blocks found in README.md")
	}
	for _, b := range blocks {
		found := ""
		for _, src := range sources {
			name, text, _ := strings.Cut(src, "\n")
			if containsIndented(strings.Split(text, "\n"), b) {
				found = name
				break
			}
		}
		if found == "" {
			t.Errorf("README.md's Go block starting %q is in no .go file: put it in a compiled example or test, and quote that", b[0])
		} else {
			t.Logf("README block %q: %s", b[0], found)
		}
	}
}

// goBlocks returns the lines of each ```go block of a Markdown text.
func goBlocks(md string) [][]string {
	var blocks [][]string
	var cur []string
	in := false
	for _, line := range strings.Split(md, "\n") {
		switch {
		case !in && strings.TrimSpace(line) == "```go":
			in, cur = true, nil
		case in && strings.TrimSpace(line) == "```":
			in = false
			blocks = append(blocks, cur)
		case in:
			cur = append(cur, line)
		}
	}
	return blocks
}

// containsIndented reports whether block appears in lines as consecutive
// lines, each with the same indentation prefix added (blank lines blank).
func containsIndented(lines, block []string) bool {
	for i := 0; i+len(block) <= len(lines); i++ {
		indent, ok := strings.CutSuffix(lines[i], block[0])
		if !ok || strings.TrimLeft(indent, "\t ") != "" {
			continue
		}
		match := true
		for j, b := range block {
			l := strings.TrimRight(lines[i+j], " \t")
			if b == "" && l == "" {
				continue
			}
			if l != indent+strings.TrimRight(b, " \t") {
				match = false
				break
			}
		}
		if match {
			return true
		}
	}
	return false
}
