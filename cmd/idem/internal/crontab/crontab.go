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
	var jobs []Job
	seen := map[string]int{}
	type limitLine struct {
		spec spec.Limit
		line int
	}
	limitsSeen := map[string]limitLine{}
	sc := bufio.NewScanner(r)
	n := 0
	for sc.Scan() {
		n++
		line := strings.TrimSpace(sc.Text())
		bad := func(format string, args ...any) error {
			return fmt.Errorf("%s:%d: %s", path, n, fmt.Sprintf(format, args...))
		}
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if zone, ok := strings.CutPrefix(line, "CRON_TZ="); ok {
			l, err := time.LoadLocation(strings.TrimSpace(zone))
			if err != nil || strings.TrimSpace(zone) == "" {
				return nil, bad("CRON_TZ=%s: not a time zone (use an IANA name like Asia/Shanghai)", zone)
			}
			loc = l
			continue
		}
		if k, _, ok := strings.Cut(line, "="); ok && !strings.ContainsAny(k, " \t") {
			return nil, bad("%s=: the only setting is CRON_TZ= (the commands get idem's environment)", k)
		}
		words, err := shellWords(line)
		if err != nil {
			return nil, bad("%v", err)
		}
		job := Job{Line: n, Loc: loc}
		var rest []string // JOB COMMAND [ARGS...]
		base, delay, hasDelay := strings.Cut(words[0], "+")
		named, isNamed := spec.NamedSchedule(base, loc)
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
			job.Sched, rest = named, words[1:]
		case words[0] == "@reboot":
			return nil, bad("@reboot: idem serve runs periods, not a command at start-up (run it before idem serve, in the entrypoint)")
		case strings.HasPrefix(words[0], "@"):
			// @daily, @hourly, ...: a cron descriptor, as in cronie.
			if len(words) < 3 {
				return nil, bad("want %s JOB COMMAND [ARGS...], got %d fields", words[0], len(words))
			}
			sched, err := cron.New(words[0], loc)
			if err != nil {
				return nil, bad("%s is not a cron descriptor (@yearly, @monthly, @weekly, @daily, @hourly): %v", words[0], err)
			}
			job.Sched, job.AtStart, rest = sched, true, words[1:]
		default:
			if len(words) < 7 {
				return nil, bad("want MIN HOUR DOM MON DOW JOB COMMAND [ARGS...] (or daily[+DELAY] JOB COMMAND...), got %d fields", len(words))
			}
			spec := strings.Join(words[:5], " ")
			sched, err := cron.New(spec, loc)
			if err != nil {
				return nil, bad("%q is not a 5-field cron expression: %v", spec, err)
			}
			job.Sched, job.AtStart, rest = sched, true, words[5:]
		}
		name := rest[0]
		if err := idemstore.ValidateJob(name); err != nil {
			return nil, bad("job %v", err)
		}
		if prev, dup := seen[name]; dup {
			return nil, bad("job %s is on line %d already (a job's name must be unique: its periods are kept under it)", name, prev)
		}
		seen[name] = n
		argv := rest[1:]
		// after:JOB, after:JOB/PERIODS, after:previous: as 'idem run --after';
		// rate:NAME=PER_SECOND[,BURST] and at-once:NAME=MAX: as --rate and
		// --at-once.
	words:
		for len(argv) > 0 {
			word := argv[0]
			switch {
			case strings.HasPrefix(word, "after:"):
				v := strings.TrimPrefix(word, "after:")
				opt, err := spec.After(v, name, loc)
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
				if prev, ok := limitsSeen[sp.Name]; ok && prev.spec != sp {
					return nil, bad("%s: limit %s is %s on line %d: give one limit one meaning everywhere", word, sp.Name, prev.spec, prev.line)
				}
				limitsSeen[sp.Name] = limitLine{sp, n}
				job.Limits = append(job.Limits, sp)
			default:
				break words
			}
			argv = argv[1:]
		}
		if len(argv) == 0 {
			return nil, bad("job %s has no command", name)
		}
		if lookPath {
			if _, err := exec.LookPath(argv[0]); err != nil {
				return nil, bad("command %q: %v", argv[0], err)
			}
		}
		job.Name, job.Argv = name, argv
		jobs = append(jobs, job)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(jobs) == 0 {
		return nil, fmt.Errorf("%s: no job lines", path)
	}
	return jobs, nil
}
