// Package ui is a web page for idem's operators: every job's periods at a
// glance, one record's history, the outbox, and (only when enabled) the
// operators' actions. It is an http.Handler a service mounts under a path
// of its own, and what the command `idem ui` serves.
//
// The pages are rendered on the server (html/template, which escapes every
// value the store holds: job names, periods, errors, values, payloads) with
// a small embedded style sheet; they need no JavaScript, follow the
// browser's dark mode and fit a phone. Every link is relative and every
// page is one path segment deep, so the handler works under any prefix
// (http.StripPrefix). No request path reaches the file system: the style
// sheet is embedded, everything else comes from the store.
//
// Safe by default:
//   - Actions (resolve done/retry, reset, run now, re-run, outbox
//     retry/drop) are refused
//     unless [Options.Actions] is set. Each is a form that leads to a
//     confirmation page naming the key, whose POST carries a CSRF token (an
//     HMAC, under a secret drawn at random when the handler is made, of the
//     action and its key), compared in constant time. Each action is logged
//     through [Options.Logger] with the client's address.
//   - With [Options.Token] set, every request must carry the token: an
//     "Authorization: Bearer" header, or the cookie that a visit with
//     ?token= sets (HttpOnly, SameSite=Strict). It is compared in constant
//     time.
//   - With neither a token nor [Options.Insecure], only loopback clients are
//     served, and only under a loopback host name (localhost, 127.0.0.1,
//     [::1]), so that a web page elsewhere cannot reach it through DNS
//     rebinding.
//
// What the pages read: the overview, a summary per job
// ([idemstore.Summarizer]) and a page of the records that need a look; a
// job's page, its summary and a page of its latest records
// ([idemstore.Pager]; ?before=PERIOD for older ones) with the grid of their
// months. With a store that has both their cost in this process grows
// with the jobs and the rows shown, not with the records kept: the SQLite
// ledger keeps its counts as it writes; the Postgres ledger counts on the
// server (a GROUP BY of its records per overview). What it does NOT
// promise: the same of a store without them (the state file, Redis, a
// store of your own): the pages then cut what they show from its List,
// which reads every record (of the job, for a job's page) per request; the
// search page lists the job's records (or every record) in either case; a
// store that cannot list its records cannot be shown.
package ui

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"embed"
	"encoding/base64"
	"errors"
	"html/template"
	"log/slog"
	"net"
	"net/http"
	"path"
	"strings"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemstore"
)

// Store is what every page needs of a store: *idem.Ledger, *idem.StateFile,
// the Postgres ledger of pgledger and the Redis store of redisstore have
// these methods. A store that is also an [idemstore.Summarizer] and an
// [idemstore.Pager] (*idem.Ledger) is read through them: see the package's
// doc for what each page reads.
type Store interface {
	Lookup(ctx context.Context, key idemstore.Key) (idemstore.Record, bool, error)
	Resolve(ctx context.Context, key idemstore.Key, to idemstore.Resolution) error
	List(ctx context.Context, f idemstore.Filter) ([]idemstore.Record, error)
}

// JobStore is a store that keeps a catch-up cursor per job; the pages mark
// it when the store has it.
type JobStore interface {
	Job(ctx context.Context, job string) (idemstore.JobState, error)
}

// ItemStore is a store that keeps the items of a period (idem.Each); a
// record's page counts them by state when the store has it.
type ItemStore interface {
	CountItems(ctx context.Context, key idemstore.Key) (idemstore.ItemCounts, error)
}

// OutboxStore is a store with a transactional outbox. A store without one
// (the state file) has no outbox page: the pages say so.
type OutboxStore interface {
	ListOutbox(ctx context.Context, f idemstore.OutboxFilter) ([]idemstore.OutboxRecord, error)
	OutboxStats(ctx context.Context) ([]idemstore.OutboxTopicStats, error)
	RetryOutbox(ctx context.Context, id string, now time.Time) error
	DropOutbox(ctx context.Context, id string) error
}

// Options configure a Handler. The zero value serves read-only pages to
// loopback clients.
type Options struct {
	// Actions enables the operators' actions: resolve done/retry, reset,
	// run now, re-run (with a reason), outbox retry/drop. Without it they
	// are refused (403).
	Actions bool

	// Token, if set, is required on every request (compared in constant
	// time): "Authorization: Bearer TOKEN", or the cookie set by a visit
	// with ?token=TOKEN.
	Token string

	// Insecure serves clients from any address and under any host name
	// without a token: for a handler behind the service's own
	// authentication. Without it and without Token, only loopback clients
	// are served.
	Insecure bool

	// Schedules, by job, lets the overview tell each job's latest due
	// period and whether it is late (due and not done). Jobs without one
	// show neither.
	Schedules map[string]idem.Schedule

	// After, by job, is what a job's periods wait for (its idem.After
	// dependencies): with the job's schedule, the overview tells, of a job
	// whose next period to settle waits, which upstream periods it waits
	// for and their status, instead of calling it late.
	After map[string][]Dependency

	// Refresh is how often the overview reloads itself (a meta refresh,
	// no script); 0 means 30 s, a negative value never.
	Refresh time.Duration

	// Logger receives a line per action (and per refused one); nil means
	// slog.Default().
	Logger *slog.Logger

	// Now is the clock (outbox retries are due at Now; late and ages are
	// measured from it); nil means time.Now.
	Now func() time.Time

	// Title names the page ("idem" when empty).
	Title string
}

// A Dependency is one idem.After of a job: its periods wait for the
// periods of Job that Mapping names.
type Dependency struct {
	Job     string
	Mapping idem.Mapping
}

// Handler serves the pages. Make one with New.
type Handler struct {
	s      Store
	o      Options
	secret []byte
	mux    *http.ServeMux
	tpl    map[string]*template.Template
}

// ErrNoStore is returned by New for a nil store.
var ErrNoStore = errors.New("ui: no store")

//go:embed templates/*.html static/style.css
var files embed.FS

// New returns the handler of s's pages.
func New(s Store, o Options) (*Handler, error) {
	if s == nil {
		return nil, ErrNoStore
	}
	if strings.TrimSpace(o.Token) != o.Token {
		return nil, errors.New("ui: Options.Token has leading or trailing white space")
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Refresh == 0 {
		o.Refresh = 30 * time.Second
	}
	if o.Title == "" {
		o.Title = "idem"
	}
	h := &Handler{s: s, o: o, secret: make([]byte, 32), mux: http.NewServeMux()}
	if _, err := rand.Read(h.secret); err != nil {
		return nil, err
	}
	tpl, err := parseTemplates()
	if err != nil {
		return nil, err
	}
	h.tpl = tpl
	h.mux.HandleFunc("GET /{$}", h.overview)
	h.mux.HandleFunc("GET /job", h.job)
	h.mux.HandleFunc("GET /record", h.record)
	h.mux.HandleFunc("GET /outbox", h.outbox)
	h.mux.HandleFunc("GET /search", h.search)
	h.mux.HandleFunc("GET /action", h.confirm)
	h.mux.HandleFunc("POST /action", h.act)
	h.mux.HandleFunc("GET /style.css", h.style)
	return h, nil
}

const cookieName = "idem_ui_token"

// ServeHTTP checks who asks (token or loopback), then serves the page.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	hd := w.Header()
	hd.Set("Content-Security-Policy", "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("Referrer-Policy", "no-referrer")
	hd.Set("X-Frame-Options", "DENY")
	if h.o.Token != "" {
		if q := r.URL.Query().Get("token"); q != "" && r.Method == http.MethodGet {
			if !h.tokenOK(q) {
				h.refuse(w, r, http.StatusUnauthorized, "wrong token")
				return
			}
			http.SetCookie(w, &http.Cookie{Name: cookieName, Value: q, Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
			u := *r.URL
			v := u.Query()
			v.Del("token")
			u.RawQuery = v.Encode()
			// Relative, so that it works under any prefix (http.Redirect
			// would make it absolute).
			w.Header().Set("Location", "./"+path.Base("/"+strings.TrimPrefix(u.Path, "/"))+querySuffix(u.RawQuery))
			w.WriteHeader(http.StatusSeeOther)
			return
		}
		if !h.authorized(r) {
			h.refuse(w, r, http.StatusUnauthorized, "this page needs its token: open it with ?token=TOKEN, or send Authorization: Bearer TOKEN")
			return
		}
	} else if !h.o.Insecure {
		if !loopbackAddr(r.RemoteAddr) {
			h.refuse(w, r, http.StatusForbidden, "only loopback clients are served without a token (start it with a token, or insecure)")
			return
		}
		if !loopbackHost(r.Host) {
			h.refuse(w, r, http.StatusForbidden, "host "+r.Host+" is not a loopback name: without a token only localhost, 127.0.0.1 and [::1] are served")
			return
		}
	}
	h.mux.ServeHTTP(w, r)
}

func querySuffix(q string) string {
	if q == "" {
		return ""
	}
	return "?" + q
}

func (h *Handler) tokenOK(t string) bool {
	return subtle.ConstantTimeCompare([]byte(t), []byte(h.o.Token)) == 1
}

func (h *Handler) authorized(r *http.Request) bool {
	if a := r.Header.Get("Authorization"); a != "" {
		if t, ok := strings.CutPrefix(a, "Bearer "); ok && h.tokenOK(t) {
			return true
		}
	}
	if c, err := r.Cookie(cookieName); err == nil && h.tokenOK(c.Value) {
		return true
	}
	return false
}

// loopbackAddr reports whether a RemoteAddr (host:port) is a loopback
// address.
func loopbackAddr(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = addr
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// loopbackHost reports whether a Host header names this machine's loopback.
func loopbackHost(host string) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.Trim(host, "[]"), ".")
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// csrf is the token of one action on one key or message: an HMAC of them
// under the handler's secret.
func (h *Handler) csrf(a action) string {
	m := hmac.New(sha256.New, h.secret)
	m.Write([]byte(a.Do + "\x00" + a.Key.Job + "\x00" + a.Key.Period + "\x00" + a.ID))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

func (h *Handler) csrfOK(a action, token string) bool {
	return token != "" && hmac.Equal([]byte(token), []byte(h.csrf(a)))
}

func (h *Handler) style(w http.ResponseWriter, r *http.Request) {
	b, err := files.ReadFile("static/style.css")
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/css; charset=utf-8")
	w.Header().Set("Cache-Control", "max-age=3600")
	_, _ = w.Write(b)
}
