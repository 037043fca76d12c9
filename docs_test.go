package idem_test

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode"

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

// docPages returns README.md and the pages of docs/, the Markdown files
// whose Go blocks TestDocsGoSnippets checks.
func docPages(t *testing.T) []string {
	t.Helper()
	pages, err := filepath.Glob(filepath.Join("docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	if len(pages) == 0 {
		t.Fatal("no pages in docs/")
	}
	return append([]string{"README.md"}, pages...)
}

// TestDocsGoSnippets: every Go block of README.md and of the pages of
// docs/ is code that compiles and runs: it appears, line for line (at any
// indentation), in a .go file of the repository, whose tests run it.
func TestDocsGoSnippets(t *testing.T) {
	t.Parallel()
	var sources []string
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
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
	for _, page := range docPages(t) {
		md, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		blocks := goBlocks(string(md))
		if len(blocks) == 0 {
			t.Errorf("%s: no Go blocks", page)
		}
		for i, b := range blocks {
			if len(b) == 0 {
				t.Errorf("%s: Go block %d is empty", page, i+1)
				continue
			}
			found := ""
			for _, src := range sources {
				name, text, _ := strings.Cut(src, "\n")
				if containsIndented(strings.Split(text, "\n"), b) {
					found = name
					break
				}
			}
			if found == "" {
				t.Errorf("%s: Go block %d (of %d), starting %q, is in no .go file: put it in a compiled example or test, and quote that", page, i+1, len(blocks), b[0])
			} else {
				t.Logf("%s: Go block %d %q: %s", page, i+1, b[0], found)
			}
		}
	}
}

// TestDocsPagesStartWithExample: every page of docs/ starts with its
// title, one paragraph and a Go block, and README.md is a front door of at
// most 300 lines whose first Go block calls idem.Run.
func TestDocsPagesStartWithExample(t *testing.T) {
	t.Parallel()
	for _, page := range docPages(t)[1:] {
		b, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(string(b), "\n")
		i := 2
		for i < len(lines) && strings.TrimSpace(lines[i]) != "" {
			i++
		}
		if len(lines) < 4 || !strings.HasPrefix(lines[0], "# ") || lines[1] != "" || i == 2 || i+1 >= len(lines) || lines[i+1] != "```go" {
			t.Errorf("%s: does not start with a title, one paragraph and a Go block", page)
		}
	}
	b, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(b), "\n"); n > 300 {
		t.Errorf("README.md has %d lines, want at most 300: move the detail to a page of docs/", n)
	}
	if blocks := goBlocks(string(b)); len(blocks) == 0 || !strings.Contains(strings.Join(blocks[0], "\n"), "idem.Run(ctx, ") {
		t.Errorf("README.md: the first Go block does not call idem.Run(ctx, key, fn)")
	}
}

// TestDocsLinks: every relative link of the repository's Markdown files
// names a file that exists and, with a #fragment, a heading of that file
// (as GitHub makes anchors of headings).
func TestDocsLinks(t *testing.T) {
	t.Parallel()
	var pages []string
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(path, ".md") && path != "CHANGELOG.md" {
			pages = append(pages, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	link := regexp.MustCompile(`\]\(([^)\s]+)\)`)
	for _, page := range pages {
		b, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range link.FindAllStringSubmatch(proseOf(string(b)), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			file, frag, _ := strings.Cut(target, "#")
			path := page
			if file != "" {
				path = filepath.Join(filepath.Dir(page), file)
			}
			if _, err := os.Stat(path); err != nil {
				t.Errorf("%s: link %q: %v", page, target, err)
				continue
			}
			if frag == "" {
				continue
			}
			tb, err := os.ReadFile(path)
			if err != nil {
				t.Errorf("%s: link %q: %v", page, target, err)
				continue
			}
			if !slices.Contains(anchorsOf(string(tb)), frag) {
				t.Errorf("%s: link %q: %s has no heading with the anchor #%s", page, target, path, frag)
			}
		}
	}
}

// proseOf returns md without its fenced code blocks.
func proseOf(md string) string {
	var out []string
	in := false
	for _, line := range strings.Split(md, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			in = !in
			continue
		}
		if !in {
			out = append(out, line)
		}
	}
	return strings.Join(out, "\n")
}

// anchorsOf returns the anchors GitHub gives the headings of md: lower
// case, punctuation dropped, spaces made hyphens.
func anchorsOf(md string) []string {
	var anchors []string
	for _, line := range strings.Split(proseOf(md), "\n") {
		title, ok := strings.CutPrefix(strings.TrimLeft(line, "#"), " ")
		if !ok || !strings.HasPrefix(line, "#") {
			continue
		}
		var a strings.Builder
		for _, r := range strings.ToLower(strings.TrimSpace(title)) {
			switch {
			case r == ' ':
				a.WriteRune('-')
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
				a.WriteRune(r)
			}
		}
		anchors = append(anchors, a.String())
	}
	return anchors
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
