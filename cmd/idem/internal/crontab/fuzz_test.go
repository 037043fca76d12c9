package crontab

import (
	"strconv"
	"strings"
	"testing"
	"time"
)

// FuzzParse: Parse never panics, and a file it accepts means what its
// jobs say: each job written back as a line of its own (format, with the
// zone on a CRON_TZ= line before it and every word quoted) parses again to
// the same job. So nothing of a line is lost or read twice, and quoting is
// undone exactly once.
func FuzzParse(f *testing.F) {
	for _, file := range goodFiles {
		f.Add(file)
	}
	for file := range badFiles {
		f.Add(file)
	}
	f.Fuzz(func(t *testing.T, file string) {
		jobs, err := Parse("crontab", strings.NewReader(file), time.UTC, false)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "crontab:") {
				t.Fatalf("Parse: an error that does not name the file: %v", err)
			}
			return
		}
		if len(jobs) == 0 {
			t.Fatal("Parse: no jobs and no error")
		}
		for i, j := range jobs {
			if len(j.Argv) == 0 || len(j.Deps) != len(j.After) || (i > 0 && j.Line <= jobs[i-1].Line) {
				t.Fatalf("Parse: job %d is %+v", i, j)
			}
		}
		text := format(jobs)
		again, err := Parse("again", strings.NewReader(text), time.UTC, false)
		if err != nil {
			t.Fatalf("the jobs of %q written back as %q do not parse: %v", file, text, err)
		}
		if len(again) != len(jobs) {
			t.Fatalf("the jobs of %q written back as %q: %d jobs, want %d", file, text, len(again), len(jobs))
		}
		for i := range jobs {
			if a, b := summary(jobs[i]), summary(again[i]); a != b {
				t.Fatalf("the jobs of %q written back as %q: job %d is\n%s\nnot\n%s", file, text, i, b, a)
			}
		}
	})
}

// format writes jobs back as a crontab file.
func format(jobs []Job) string {
	var b strings.Builder
	for _, j := range jobs {
		b.WriteString("CRON_TZ=" + j.Loc.String() + "\n")
		words := []string{when(j), quote(j.Name)}
		for _, a := range j.After {
			words = append(words, quote("after:"+a))
		}
		for _, l := range j.Limits {
			if l.Max > 0 {
				words = append(words, quote("at-once:"+l.Name+"="+strconv.Itoa(l.Max)))
			} else {
				words = append(words, quote("rate:"+l.Name+"="+strconv.FormatFloat(l.PerSecond, 'g', -1, 64)+","+strconv.Itoa(l.Burst)))
			}
		}
		for _, w := range j.Argv {
			words = append(words, quote(w))
		}
		b.WriteString(strings.Join(words, " ") + "\n")
	}
	return b.String()
}

// when is the line's schedule as written: the cron expression or
// descriptor of a cron line (from its String, "cron(SPEC)@ZONE"), the
// calendar and delay of a business line ("daily@ZONE").
func when(j Job) string {
	s := j.Sched.String()
	if j.AtStart {
		spec, ok := strings.CutPrefix(s, "cron(")
		if i := strings.LastIndex(spec, ")@"); ok && i >= 0 {
			return spec[:i]
		}
		return s
	}
	kind, _, _ := strings.Cut(s, "@")
	if j.Delay != 0 {
		kind += "+" + j.Delay.String()
	}
	return kind
}

// quote is w single-quoted for shellWords.
func quote(w string) string {
	return "'" + strings.ReplaceAll(w, "'", `'\''`) + "'"
}

// summary is what a job means, for comparing two.
func summary(j Job) string {
	var limits []string
	for _, l := range j.Limits {
		limits = append(limits, l.String())
	}
	return strings.Join([]string{j.Name, j.Sched.String(), j.Loc.String(), strconv.FormatBool(j.AtStart), j.Delay.String(),
		strconv.Quote(strings.Join(j.After, "\x00")), strings.Join(limits, ";"), strconv.Quote(strings.Join(j.Argv, "\x00")),
		strconv.Itoa(len(j.Deps))}, " | ")
}
