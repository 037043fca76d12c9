package crontab

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// The files of the tests below; FuzzParse starts from them.
var (
	goodFiles = []string{
		"# settle yesterday, Shanghai time\nCRON_TZ=Asia/Shanghai\n0 2 * * * settle sh -c 'echo \"$IDEM_PERIOD\" >> out.txt'\n*/15 * * * * sync true\n",
		"0 0 * * 7 sunday true\n0 0 */2 * 1 odd_mondays true\n@daily midnight true\n",
		"CRON_TZ=Asia/Shanghai\ndaily+2h settle after:previous rate:mail=200,20 at-once:report-db=2 /opt/settle.sh --day \"$IDEM_PERIOD\"\n" +
			"hourly imports after:settle/daily true\nweekly+1.5d report after:imports/hourly at-once:report-db=2 sh -c 'exec report'\n",
	}
	badFiles = map[string]string{
		"# x\n\n* * * * tick true\n":                            "crontab:3: want MIN HOUR DOM MON DOW JOB COMMAND",
		"61 * * * * tick true\n":                                `crontab:1: "61 * * * *" is not a 5-field cron expression`,
		"CRON_TZ=Mars/Olympus\n* * * * * tick true\n":           "crontab:1: CRON_TZ=Mars/Olympus: not a time zone",
		"MAILTO=ops\n":                                          "crontab:1: MAILTO=: the only setting is CRON_TZ=",
		"* * * * * tick sh -c 'echo\n":                          "crontab:1: unterminated single quote",
		"* * * * * tick true\n0 * * * * tick true\n":            "crontab:2: job tick is on line 1 already",
		"# nothing\n":                                           "crontab: no job lines",
		"@reboot warm true\n":                                   "crontab:1: @reboot: idem serve runs periods, not a command at start-up",
		"daily+2x settle true\n":                                "crontab:1: daily+2x: the delay after each period's end",
		"0 0 * * 8 bad true\n":                                  `crontab:1: "0 0 * * 8" is not a 5-field cron expression`,
		"daily settle\n":                                        "crontab:1: want daily[+DELAY] JOB COMMAND",
		"daily settle after:settle true\n":                      "crontab:1: after:settle: \"settle\": a job cannot wait for its own periods",
		"daily a rate:m=1 true\ndaily b rate:m=2 true\n":        "crontab:2: rate:m=2: limit m is rate m=1,1 on line 1",
		"daily settle rate:mail true\n":                         "crontab:1: rate:mail: \"mail\": want NAME=PER_SECOND[,BURST]",
		"daily settle after:previous\n":                         "crontab:1: job settle has no command",
		"* * * * * tick \"unterminated\n":                       "crontab:1: unterminated double quote",
		"* * * * * tick true \\":                                "crontab:1: a backslash at the end of the line",
		"@every tick true\n":                                    "crontab:1: @every is not a cron descriptor",
		"daily '' true\n":                                       "crontab:1: job ",
		"CRON_TZ=\ndaily settle true\n":                         "crontab:1: CRON_TZ=: not a time zone",
		"* * * * * tick true\n* * * * * tock no-such-command\n": "", // lookPath only
	}
)

func TestParse(t *testing.T) {
	t.Parallel()
	jobs, err := Parse("crontab", strings.NewReader(goodFiles[0]), time.UTC, true)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, j := range jobs {
		got = append(got, strings.Join([]string{j.Name, j.String(), strings.Join(j.Argv, "|")}, " "))
	}
	want := []string{`settle cron(0 2 * * *)@Asia/Shanghai sh|-c|echo "$IDEM_PERIOD" >> out.txt`, "sync cron(*/15 * * * *)@Asia/Shanghai true"}
	if !slices.Equal(got, want) {
		t.Errorf("Parse = %q, want %q", got, want)
	}
	if jobs[0].Line != 3 || jobs[1].Line != 4 || !jobs[0].AtStart {
		t.Errorf("Parse: lines %d, %d, at start %v; want 3, 4, true", jobs[0].Line, jobs[1].Line, jobs[0].AtStart)
	}

	jobs, err = Parse("crontab", strings.NewReader(goodFiles[1]), time.UTC, false)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := jobs[0].String()+" "+jobs[2].String(), "cron(0 0 * * 7)@UTC cron(@daily)@UTC"; got != want {
		t.Errorf("cronie's lines: %q, want %q", got, want)
	}

	jobs, err = Parse("crontab", strings.NewReader(goodFiles[2]), time.UTC, false)
	if err != nil {
		t.Fatal(err)
	}
	s := jobs[0]
	if s.String() != "daily@Asia/Shanghai, each due 2h0m0s after it ends" || s.AtStart || s.Delay != 2*time.Hour ||
		!slices.Equal(s.After, []string{"previous"}) || len(s.Deps) != 1 || len(s.Limits) != 2 ||
		s.Limits[0].String() != "rate mail=200,20" || s.Limits[1].String() != "at-once report-db=2" ||
		!slices.Equal(s.Argv, []string{"/opt/settle.sh", "--day", "$IDEM_PERIOD"}) {
		t.Errorf("a business line: %+v", s)
	}
	if r := jobs[2]; r.Delay != 36*time.Hour || !slices.Equal(r.After, []string{"imports/hourly"}) {
		t.Errorf("weekly+1.5d: delay %v, after %q", r.Delay, r.After)
	}
}

func TestParseRefuses(t *testing.T) {
	t.Parallel()
	for file, want := range badFiles {
		_, err := Parse("crontab", strings.NewReader(file), time.UTC, true)
		if want == "" {
			want = `crontab:2: command "no-such-command"`
		}
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Parse(%q): %v, want %q in it", file, err, want)
		}
	}
}

func TestShellWords(t *testing.T) {
	t.Parallel()
	for in, want := range map[string][]string{
		`a  b	c`:               {"a", "b", "c"},
		`sh -c 'echo "$X"'`:    {"sh", "-c", `echo "$X"`},
		`"a \"b\" \$ \x" c\ d`: {`a "b" $ \x`, "c d"},
		`'it'\''s' ''`:         {"it's", ""},
		`x"y"'z'`:              {"xyz"},
	} {
		got, err := shellWords(in)
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("shellWords(%s) = %q, %v; want %q", in, got, err, want)
		}
	}
}
