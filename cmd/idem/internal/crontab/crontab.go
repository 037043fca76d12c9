// Package crontab reads the crontab file of 'idem serve': comments,
// CRON_TZ= lines and job lines, each a cron line (five fields or an
// @descriptor) or a business line (daily[+DELAY], hourly, weekly,
// monthly), then the job's name, its after:, rate: and at-once: words and
// its command, split into words as a shell would. The command's help
// (serveLong in cmd/idem/serve.go) is the format's reference.
package crontab

import (
	"bufio"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/cmd/idem/internal/spec"
	"github.com/idemgo/idem/cron"
	"github.com/idemgo/idem/idemstore"
)

// Job is a job line of a crontab file.
type Job struct {
	Line  int // the line's number, from 1
	Name  string
	Sched idem.Schedule
	Loc   *time.Location // the line's zone (CRON_TZ=, or the zone given to Parse)
	Argv  []string       // the command and its arguments
	// A cron line's periods (slots) are due when they start; a business
	// line's (daily, ...) when they end, plus Delay.
	AtStart bool
	Delay   time.Duration
	After   []string      // the values of the line's after: words, as written (previous, JOB, JOB/PERIODS)
	Deps    []idem.Option // After's catch-up dependencies, one per word
	Limits  []spec.Limit  // the line's rate: and at-once: words (shared limits)
}

// String describes the line's periods, for --check -v.
func (j Job) String() string {
	if j.AtStart {
		return j.Sched.String()
	}
	return fmt.Sprintf("%s, each due %v after it ends", j.Sched, j.Delay)
}

// Due are the line's Scheduler options of when a period is due.
func (j Job) Due() []idem.Option {
	if j.AtStart {
		return []idem.Option{idem.DueAtStart()}
	}
	return []idem.Option{idem.DueAfter(j.Delay)}
}

// Parse reads the crontab file path from r; loc is the zone of the lines
// before any CRON_TZ= line. lookPath checks that each command can be
// found. An error names the file and the line.
func Parse(path string, r io.Reader, loc *time.Location, lookPath bool) ([]Job, error) {
	p := &parser{path: path, loc: loc, lookPath: lookPath, seen: map[string]int{}, limits: map[string]limitLine{}}
	var jobs []Job
	sc := bufio.NewScanner(r)
	n := 0
	for sc.Scan() {
		n++
		job, ok, err := p.line(n, strings.TrimSpace(sc.Text()))
		if err != nil {
			return nil, err
		}
		if ok {
			jobs = append(jobs, job)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(jobs) == 0 {
		return nil, fmt.Errorf("%s: no job lines", path)
	}
	return jobs, nil
}

// parser is what Parse knows of the lines before the one it reads.
type parser struct {
	path     string
	loc      *time.Location // the zone of the lines from here (CRON_TZ=)
	lookPath bool
	seen     map[string]int       // the line of each job
	limits   map[string]limitLine // the first line of each limit
}

type limitLine struct {
	spec spec.Limit
	line int
}

// line reads line n (trimmed): a job line's job, ok false for a comment, a
// blank line or CRON_TZ=.
func (p *parser) line(n int, line string) (job Job, ok bool, err error) {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%s:%d: %s", p.path, n, fmt.Sprintf(format, args...))
	}
	if line == "" || strings.HasPrefix(line, "#") {
		return Job{}, false, nil
	}
	if zone, ok := strings.CutPrefix(line, "CRON_TZ="); ok {
		l, err := time.LoadLocation(strings.TrimSpace(zone))
		if err != nil || strings.TrimSpace(zone) == "" {
			return Job{}, false, bad("CRON_TZ=%s: not a time zone (use an IANA name like Asia/Shanghai)", zone)
		}
		p.loc = l
		return Job{}, false, nil
	}
	if k, _, ok := strings.Cut(line, "="); ok && !strings.ContainsAny(k, " \t") {
		return Job{}, false, bad("%s=: the only setting is CRON_TZ= (the commands get idem's environment)", k)
	}
	words, err := shellWords(line)
	if err != nil {
		return Job{}, false, bad("%v", err)
	}
	job = Job{Line: n, Loc: p.loc}
	rest, err := p.when(&job, words, bad) // JOB COMMAND [ARGS...]
	if err != nil {
		return Job{}, false, err
	}
	name := rest[0]
	if err := idemstore.ValidateJob(name); err != nil {
		return Job{}, false, bad("job %v", err)
	}
	if prev, dup := p.seen[name]; dup {
		return Job{}, false, bad("job %s is on line %d already (a job's name must be unique: its periods are kept under it)", name, prev)
	}
	p.seen[name] = n
	argv, err := p.words(&job, name, rest[1:], bad)
	if err != nil {
		return Job{}, false, err
	}
	if len(argv) == 0 {
		return Job{}, false, bad("job %s has no command", name)
	}
	if p.lookPath {
		if _, err := exec.LookPath(argv[0]); err != nil {
			return Job{}, false, bad("command %q: %v", argv[0], err)
		}
	}
	job.Name, job.Argv = name, argv
	return job, true, nil
}

// when reads the schedule that starts a job line's words into job, and
// returns the words after it.
func (p *parser) when(job *Job, words []string, bad func(string, ...any) error) (rest []string, err error) {
	base, delay, hasDelay := strings.Cut(words[0], "+")
	named, isNamed := spec.NamedSchedule(base, p.loc)
	switch {
	case isNamed:
		// A business line: PERIODS[+DELAY] JOB COMMAND [ARGS...]
		if len(words) < 3 {
			return nil, bad("want %s[+DELAY] JOB COMMAND [ARGS...], got %d fields", base, len(words))
		}
		if hasDelay {
			d, err := spec.ParseDuration(delay)
			if err != nil {
				return nil, bad("%s: the delay after each period's end: %v", words[0], err)
			}
			job.Delay = d
		}
		job.Sched = named
		return words[1:], nil
	case words[0] == "@reboot":
		return nil, bad("@reboot: idem serve runs periods, not a command at start-up (run it before idem serve, in the entrypoint)")
	case strings.HasPrefix(words[0], "@"):
		// @daily, @hourly, ...: a cron descriptor, as in cronie.
		if len(words) < 3 {
			return nil, bad("want %s JOB COMMAND [ARGS...], got %d fields", words[0], len(words))
		}
		sched, err := cron.New(words[0], p.loc)
		if err != nil {
			return nil, bad("%s is not a cron descriptor (@yearly, @monthly, @weekly, @daily, @hourly): %v", words[0], err)
		}
		job.Sched, job.AtStart = sched, true
		return words[1:], nil
	}
	if len(words) < 7 {
		return nil, bad("want MIN HOUR DOM MON DOW JOB COMMAND [ARGS...] (or daily[+DELAY] JOB COMMAND...), got %d fields", len(words))
	}
	expr := strings.Join(words[:5], " ")
	sched, err := cron.New(expr, p.loc)
	if err != nil {
		return nil, bad("%q is not a 5-field cron expression: %v", expr, err)
	}
	job.Sched, job.AtStart = sched, true
	return words[5:], nil
}

// words reads the words between job name's name and its command into job
// and returns the command: after:JOB, after:JOB/PERIODS, after:previous,
// as 'idem run --after'; rate:NAME=PER_SECOND[,BURST] and
// at-once:NAME=MAX, as --rate and --at-once.
func (p *parser) words(job *Job, name string, argv []string, bad func(string, ...any) error) ([]string, error) {
	for ; len(argv) > 0; argv = argv[1:] {
		word := argv[0]
		switch {
		case strings.HasPrefix(word, "after:"):
			v := strings.TrimPrefix(word, "after:")
			opt, err := spec.After(v, name, p.loc)
			if err != nil {
				return nil, bad("%s: %v", word, err)
			}
			job.After, job.Deps = append(job.After, v), append(job.Deps, opt)
		case strings.HasPrefix(word, "rate:"), strings.HasPrefix(word, "at-once:"):
			var sp spec.Limit
			var err error
			if v, ok := strings.CutPrefix(word, "rate:"); ok {
				sp, err = spec.ParseRate(v)
			} else {
				sp, err = spec.ParseAtOnce(strings.TrimPrefix(word, "at-once:"))
			}
			if err != nil {
				return nil, bad("%s: %v", word, err)
			}
			if prev, ok := p.limits[sp.Name]; ok && prev.spec != sp {
				return nil, bad("%s: limit %s is %s on line %d: give one limit one meaning everywhere", word, sp.Name, prev.spec, prev.line)
			}
			p.limits[sp.Name] = limitLine{sp, job.Line}
			job.Limits = append(job.Limits, sp)
		default:
			return argv, nil
		}
	}
	return argv, nil
}
