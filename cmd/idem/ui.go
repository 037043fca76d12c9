package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/cmd/idem/internal/spec"
	"github.com/idemgo/idem/ui"
	"github.com/spf13/cobra"
)

// EnvUIToken is the environment variable that gives `idem ui` its token
// when --token is not given (a token in a variable stays out of ps).
const EnvUIToken = "IDEM_UI_TOKEN"

const uiLong = `Serve a web page of the ledger for operators: every job with its last
success, its periods by status (and, with --schedule, its latest due
period and whether it is late or, with --after, waiting for another job's
periods); a job's periods as a calendar grid coloured
by status; one period's record (attempts, owner, lease, last error, backoff,
params fingerprint, stored value, a fan-out's items by state, its outbox
messages); the outbox by topic; search by job and period. The pages need no
JavaScript, follow the browser's dark mode and fit a phone; the overview
reloads itself (--refresh).

Actions (resolve done or retry, reset, outbox retry and drop) are offered
only with --actions. Each leads to a confirmation page that names the key,
and is a POST with a CSRF token; each is logged on stderr. They refuse what
the commands refuse: reset refuses an unknown period (resolve decides it),
resolve refuses a done period or one a live run holds.

Safe by default: it listens on 127.0.0.1:8080 and then serves only loopback
clients asking for localhost, 127.0.0.1 or [::1]. An --addr that is not a
loopback address needs --token (or $IDEM_UI_TOKEN): every request must then
carry it, as "Authorization: Bearer TOKEN" or through the cookie that opening
the page once with ?token=TOKEN sets. --insecure serves any client without
a token instead (behind a proxy that authenticates them).

It runs until SIGINT or SIGTERM.

Exit status: 0 stopped by a signal, 1 the server failed, 2 usage error or no
ledger.`

func newUICmd() *cobra.Command {
	var addr, token string
	var actions, insecure bool
	var refresh time.Duration
	var schedules, afters []string
	var tz string
	cmd := &cobra.Command{
		Use:   "ui [--addr HOST:PORT] [--actions] [--token TOKEN | --insecure]",
		Short: "Serve a web page of the ledger: jobs, periods, records, outbox (and, with --actions, the repairs)",
		Long:  uiLong,
		Example: `  idem ui --ledger /var/lib/idem/ledger.db          # http://127.0.0.1:8080/, read-only
  idem ui --actions --schedule settle=daily --tz Asia/Shanghai
  IDEM_UI_TOKEN=$(openssl rand -hex 16) idem ui --addr :8080 --postgres "$DSN"`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if token == "" {
				token = os.Getenv(EnvUIToken)
			}
			if token != "" && insecure {
				return usageError(errors.New("--token and --insecure: give one (--insecure serves without a token)"))
			}
			host, _, err := net.SplitHostPort(addr)
			if err != nil {
				return flagError("--addr", err)
			}
			if !loopback(host) && token == "" && !insecure {
				return usageError(fmt.Errorf("--addr %s is not a loopback address: pass --token (or set $%s) so that every request needs it, or --insecure to serve any client without one", addr, EnvUIToken))
			}
			loc, err := loadZone(tz)
			if err != nil {
				return usageError(err)
			}
			scheds := map[string]idem.Schedule{}
			for _, s := range schedules {
				job, spec, ok := strings.Cut(s, "=")
				if !ok || job == "" {
					return usageError(fmt.Errorf("--schedule %q: want JOB=SCHEDULE, like settle=daily", s))
				}
				if scheds[job], err = parseSchedule(spec, loc); err != nil {
					return usageError(err) // names --schedule
				}
			}
			deps := map[string][]ui.Dependency{}
			for _, a := range afters {
				job, up, ok := strings.Cut(a, "=")
				if !ok || job == "" {
					return usageError(fmt.Errorf("--after %q: want JOB=UPSTREAM or JOB=UPSTREAM/PERIODS, like mail=settle", a))
				}
				upstream, m, err := spec.ParseAfter(up, job, loc)
				if err != nil {
					return flagError("--after", err)
				}
				deps[job] = append(deps[job], ui.Dependency{Job: upstream, Mapping: m})
			}
			l, clk, err := openForOps(cmd)
			if err != nil {
				return err
			}
			defer l.close()
			st, ok := l.store.(ui.Store)
			if !ok {
				return usageError(fmt.Errorf("%s cannot list its records: no page to show", l.desc))
			}
			if refresh <= 0 {
				refresh = -1 // never
			}
			h, err := ui.New(st, ui.Options{
				Actions: actions, Token: token, Insecure: insecure, Schedules: scheds, After: deps, Refresh: refresh,
				Logger: slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), nil)), Now: clk.Now, Title: "idem: " + l.desc,
			})
			if err != nil {
				return usageError(err)
			}
			ln, err := net.Listen("tcp", addr)
			if err != nil {
				return usageError(fmt.Errorf("--addr %s: %w", addr, err))
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, BaseContext: func(net.Listener) context.Context { return ctx }}
			mode := "read-only"
			if actions {
				mode = "actions on"
			}
			fmt.Fprintf(cmd.OutOrStdout(), "idem ui: %s at http://%s/ (%s)\n", l.desc, ln.Addr(), mode)
			done := make(chan error, 1)
			go func() { done <- srv.Serve(ln) }()
			select {
			case err := <-done:
				return fail(exitFailed, "ui: %w", err)
			case <-ctx.Done():
			}
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			_ = srv.Shutdown(sctx)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&addr, "addr", "127.0.0.1:8080", "where to listen (HOST:PORT); a host that is not loopback needs --token or --insecure")
	f.BoolVar(&actions, "actions", false, "offer the actions: resolve done/retry, reset, run now, re-run, outbox retry/drop (each confirmed, CSRF-checked and logged)")
	f.StringVar(&token, "token", "", "require this token on every request (default $"+EnvUIToken+"); open the page once with ?token=TOKEN")
	f.BoolVar(&insecure, "insecure", false, "serve any client without a token (only behind a proxy that authenticates them)")
	f.DurationVar(&refresh, "refresh", 30*time.Second, "how often the overview reloads itself (0: never)")
	f.StringArrayVar(&schedules, "schedule", nil, "JOB=SCHEDULE (repeatable; daily, hourly, weekly, monthly or a cron expression): the overview shows the job's latest due period and whether it is late")
	f.StringArrayVar(&afters, "after", nil, "JOB=UPSTREAM or JOB=UPSTREAM/PERIODS (repeatable; as 'idem run --after' of JOB): with JOB's --schedule, the overview says which period of JOB waits for which periods of UPSTREAM")
	f.StringVar(&tz, "tz", "Local", "the time zone of the --schedule and --after jobs")
	return cmd
}

// loopback reports whether host (of --addr) is a loopback address; ""
// (every interface) is not.
func loopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
