package ui_test

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemtest"
	"github.com/idemgo/idem/ui"
	"github.com/idemgo/idem/ui/internal/uitest"
)

// do serves one request to h and returns the status and body.
func do(t *testing.T, h http.Handler, r *http.Request) (int, string) {
	t.Helper()
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w.Code, w.Body.String()
}

// httptest.NewRequest's RemoteAddr is 192.0.2.1 and its host example.com:
// make them loopback's.
func local(r *http.Request) *http.Request {
	r.RemoteAddr = "127.0.0.1:40000"
	r.Host = "127.0.0.1:8080"
	return r
}

func localGet(t *testing.T, h http.Handler, target string) (int, string) {
	t.Helper()
	return do(t, h, local(httptest.NewRequest(http.MethodGet, target, nil)))
}

// TestPagesEscapeStoredValues: a job name, an error, a stored value and an
// outbox payload that are HTML show as text (escaped) on every page that
// shows them, and no page has a script element.
func TestPagesEscapeStoredValues(t *testing.T) {
	f := uitest.NewFixture(t)
	h := uitest.NewHandler(t, f.Ledger, ui.Options{Actions: true})
	q := url.Values{"job": {uitest.XSSJob}, "period": {"2026-10-27"}}.Encode()
	for _, tc := range []struct {
		target string
		want   []string
	}{
		{"/", []string{"&lt;script&gt;alert(1)&lt;/script&gt;", "&lt;img src=x onerror=alert(2)&gt;"}},
		{"/job?" + url.Values{"job": {uitest.XSSJob}}.Encode(), []string{"&lt;script&gt;alert(1)&lt;/script&gt;", "&lt;img src=x onerror=alert(2)&gt;"}},
		{"/record?" + q, []string{"&lt;script&gt;alert(1)&lt;/script&gt;", "&lt;img src=x onerror=alert(2)&gt;"}},
		{"/record?job=xss&period=2026-10-27", []string{`&#34;\u003cscript\u003ealert(3)\u003c/script\u003e&#34;`}},
		{"/outbox", []string{"&lt;b onmouseover=alert(4)&gt;hi&lt;/b&gt;", "410 gone: &lt;img src=x onerror=alert(2)&gt;"}},
		{"/search?job=" + url.QueryEscape(uitest.XSSJob), []string{"&lt;script&gt;alert(1)&lt;/script&gt;"}},
		{"/action?do=reset&" + q, []string{"<bdi>&lt;script&gt;alert(1)&lt;/script&gt;</bdi> <bdi>2026-10-27</bdi>"}},
	} {
		code, body := localGet(t, h, tc.target)
		if code != http.StatusOK {
			t.Errorf("GET %s: %d\n%s", tc.target, code, body)
			continue
		}
		if miss := uitest.Has(body, tc.want...); miss != "" {
			t.Errorf("GET %s: no %q in\n%s", tc.target, miss, body)
		}
		if strings.Contains(strings.ToLower(body), "<script") || strings.Contains(body, "<img") || strings.Contains(body, "<b onmouseover") {
			t.Errorf("GET %s: a stored value is in the page as HTML:\n%s", tc.target, body)
		}
	}
}

// TestActionsOffByDefault: without Options.Actions the confirmation page and
// the POST are refused (403), the record is unchanged, and the pages offer
// no action.
func TestActionsOffByDefault(t *testing.T) {
	f := uitest.NewFixture(t)
	h := uitest.NewHandler(t, f.Ledger, ui.Options{})
	key := idem.Key{Job: "pay", Period: "2026-10-27"}
	form := url.Values{"do": {ui.ResolveDone}, "job": {key.Job}, "period": {key.Period}}
	if code, body := localGet(t, h, "/action?"+form.Encode()); code != http.StatusForbidden || !strings.Contains(body, "actions are off") {
		t.Errorf("GET /action without Actions: %d\n%s", code, body)
	}
	// Even with a token taken from a handler that has actions on.
	on := uitest.NewHandler(t, f.Ledger, ui.Options{Actions: true})
	_, page := localGet(t, on, "/action?"+form.Encode())
	form.Set("csrf", csrfOf(t, page))
	if code, body := post(t, h, form); code != http.StatusForbidden || !strings.Contains(body, "actions are off") {
		t.Errorf("POST /action without Actions: %d\n%s", code, body)
	}
	if s := f.Status(t, key); s != idem.StatusUnknown {
		t.Errorf("after refused actions %s is %s, want unknown", key, s)
	}
	if _, body := localGet(t, h, "/record?job=pay&period=2026-10-27"); strings.Contains(body, `action="action"`) {
		t.Errorf("the record page offers actions although they are off:\n%s", body)
	}
}

var csrfField = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

func csrfOf(t *testing.T, page string) string {
	t.Helper()
	m := csrfField.FindStringSubmatch(page)
	if m == nil {
		t.Fatalf("no csrf field in\n%s", page)
	}
	return m[1]
}

func post(t *testing.T, h http.Handler, form url.Values) (int, string) {
	t.Helper()
	r := local(httptest.NewRequest(http.MethodPost, "/action", strings.NewReader(form.Encode())))
	r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	return do(t, h, r)
}

// TestCSRF: a POST without the token, with a wrong one, or with the token
// of another key or action is refused (403) and changes nothing; a token
// of another handler (another process's secret) too; the confirmation
// page's token works.
func TestCSRF(t *testing.T) {
	f := uitest.NewFixture(t)
	var logs bytes.Buffer
	h := uitest.NewHandler(t, f.Ledger, ui.Options{Actions: true, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	other := uitest.NewHandler(t, f.Ledger, ui.Options{Actions: true})
	key := idem.Key{Job: "pay", Period: "2026-10-27"}
	form := url.Values{"do": {ui.ResolveDone}, "job": {key.Job}, "period": {key.Period}}
	_, page := localGet(t, h, "/action?"+form.Encode())
	good := csrfOf(t, page)
	_, otherPage := localGet(t, other, "/action?"+form.Encode())
	_, retryPage := localGet(t, h, "/action?do=resolve-retry&job=pay&period=2026-10-27")
	_, settlePage := localGet(t, h, "/action?do=resolve-done&job=settle&period=2026-10-26")
	for name, tok := range map[string]string{
		"none":              "",
		"wrong":             "AAAA",
		"another process's": csrfOf(t, otherPage),
		"another action's":  csrfOf(t, retryPage),
		"another key's":     csrfOf(t, settlePage),
	} {
		bad := url.Values{"do": form["do"], "job": form["job"], "period": form["period"]}
		if tok != "" {
			bad.Set("csrf", tok)
		}
		if code, body := post(t, h, bad); code != http.StatusForbidden || !strings.Contains(body, "CSRF") {
			t.Errorf("POST with %s token: %d\n%s", name, code, body)
		}
		if s := f.Status(t, key); s != idem.StatusUnknown {
			t.Fatalf("after a POST with %s token %s is %s, want unknown", name, key, s)
		}
	}
	form.Set("csrf", good)
	if code, body := post(t, h, form); code != http.StatusOK {
		t.Fatalf("POST with the confirmation's token: %d\n%s", code, body)
	}
	if s := f.Status(t, key); s != idem.StatusDone {
		t.Errorf("after resolve-done %s is %s, want done", key, s)
	}
	if miss := uitest.Has(logs.String(), "missing or wrong CSRF token", "action=resolve-done", `target="pay 2026-10-27"`, "remote=127.0.0.1:40000"); miss != "" {
		t.Errorf("the log has no %q:\n%s", miss, logs.String())
	}
}

// TestActionsRefusedAsTheCLI: reset refuses an unknown key (it is a
// decision: resolve), a done one and one with no record; resolve refuses a
// done key (the store's ErrNotResolvable); an outbox retry of a message
// that is not parked is the store's ErrMessageNotFound. Nothing changes.
func TestActionsRefusedAsTheCLI(t *testing.T) {
	f := uitest.NewFixture(t)
	h := uitest.NewHandler(t, f.Ledger, ui.Options{Actions: true})
	for _, tc := range []struct {
		form url.Values
		want string
	}{
		{url.Values{"do": {ui.Reset}, "job": {"pay"}, "period": {"2026-10-27"}}, "is unknown, not parked"},
		{url.Values{"do": {ui.Reset}, "job": {"settle"}, "period": {"2026-10-25"}}, "is done, not parked"},
		{url.Values{"do": {ui.Reset}, "job": {"settle"}, "period": {"2030-01-01"}}, "has no record"},
		{url.Values{"do": {ui.ResolveRetry}, "job": {"settle"}, "period": {"2026-10-25"}}, "cannot be resolved"},
		{url.Values{"do": {ui.OutboxRetry}, "id": {f.Failed}}, "outbox message not found"},
	} {
		_, page := localGet(t, h, "/action?"+tc.form.Encode())
		tc.form.Set("csrf", csrfOf(t, page))
		code, body := post(t, h, tc.form)
		if code != http.StatusConflict || !strings.Contains(body, tc.want) {
			t.Errorf("%v: %d, want 409 with %q:\n%s", tc.form, code, tc.want, body)
		}
	}
	if s := f.Status(t, idem.Key{Job: "pay", Period: "2026-10-27"}); s != idem.StatusUnknown {
		t.Errorf("pay is %s after refused actions, want unknown", s)
	}
}

// TestRemoteClientsNeedToken: without a token (and without Insecure) a
// client that is not on loopback, or that names a host that is not a
// loopback name (DNS rebinding), is refused; with a token, every request
// needs it (header, or the cookie of a ?token= visit), and a wrong one is
// refused; with Insecure, any client is served.
func TestRemoteClientsNeedToken(t *testing.T) {
	f := uitest.NewFixture(t)
	h := uitest.NewHandler(t, f.Ledger, ui.Options{})
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.RemoteAddr = "203.0.113.7:5000"
	r.Host = "127.0.0.1:8080"
	if code, body := do(t, h, r); code != http.StatusForbidden || !strings.Contains(body, "only loopback clients") {
		t.Errorf("a remote client without a token: %d\n%s", code, body)
	}
	r = httptest.NewRequest(http.MethodGet, "/", nil)
	r.RemoteAddr = "127.0.0.1:5000"
	r.Host = "evil.example:8080"
	if code, body := do(t, h, r); code != http.StatusForbidden || !strings.Contains(body, "not a loopback name") {
		t.Errorf("a loopback client naming another host: %d\n%s", code, body)
	}
	for _, host := range []string{"localhost:1", "[::1]:1", "127.0.0.1"} {
		r = httptest.NewRequest(http.MethodGet, "/", nil)
		r.RemoteAddr, r.Host = "[::1]:5000", host
		if code, _ := do(t, h, r); code != http.StatusOK {
			t.Errorf("a loopback client at %s: %d", host, code)
		}
	}

	th := uitest.NewHandler(t, f.Ledger, ui.Options{Token: "s3cret"})
	remote := func(target string) *http.Request {
		r := httptest.NewRequest(http.MethodGet, target, nil)
		r.RemoteAddr = "203.0.113.7:5000"
		return r
	}
	if code, _ := do(t, th, remote("/")); code != http.StatusUnauthorized {
		t.Errorf("no token: %d, want 401", code)
	}
	r = remote("/")
	r.Header.Set("Authorization", "Bearer s3cre")
	if code, _ := do(t, th, r); code != http.StatusUnauthorized {
		t.Errorf("a wrong bearer token: %d, want 401", code)
	}
	r = remote("/")
	r.Header.Set("Authorization", "Bearer s3cret")
	if code, _ := do(t, th, r); code != http.StatusOK {
		t.Errorf("the bearer token: %d, want 200", code)
	}
	if code, _ := do(t, th, remote("/job?job=settle&token=wrong")); code != http.StatusUnauthorized {
		t.Errorf("?token=wrong: %d, want 401", code)
	}
	w := httptest.NewRecorder()
	th.ServeHTTP(w, remote("/job?job=settle&token=s3cret"))
	if w.Code != http.StatusSeeOther || w.Header().Get("Location") != "./job?job=settle" {
		t.Fatalf("?token=: %d to %q, want 303 to ./job?job=settle", w.Code, w.Header().Get("Location"))
	}
	cookies := w.Result().Cookies()
	if len(cookies) != 1 || !cookies[0].HttpOnly || cookies[0].SameSite != http.SameSiteStrictMode {
		t.Fatalf("?token= set cookies %v, want one HttpOnly SameSite=Strict", cookies)
	}
	r = remote("/job?job=settle")
	r.AddCookie(cookies[0])
	if code, body := do(t, th, r); code != http.StatusOK || !strings.Contains(body, "2026-10-25") {
		t.Errorf("with the cookie: %d\n%s", code, body)
	}

	ih := uitest.NewHandler(t, f.Ledger, ui.Options{Insecure: true})
	if code, _ := do(t, ih, remote("/")); code != http.StatusOK {
		t.Errorf("Insecure, a remote client: %d, want 200", code)
	}
}

// TestStateFileHasNoOutbox: a state file's pages show its records, and
// the outbox and items as absent, not as an error.
func TestStateFileHasNoOutbox(t *testing.T) {
	ctx := context.Background()
	s, err := idem.OpenStateFile(filepath.Join(t.TempDir(), "state.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Run(ctx, idem.Key{Job: "report", Period: "2026-10-27"}, func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
	h := uitest.NewHandler(t, s, ui.Options{})
	code, body := localGet(t, h, "/")
	if code != http.StatusOK || uitest.Has(body, "report", "This store has no outbox") != "" || strings.Contains(body, `href="outbox"`) {
		t.Errorf("overview: %d\n%s", code, body)
	}
	code, body = localGet(t, h, "/record?job=report&period=2026-10-27")
	if code != http.StatusOK || uitest.Has(body, "done", "This store has no outbox", "This store keeps no items") != "" {
		t.Errorf("record: %d\n%s", code, body)
	}
	if code, body := localGet(t, h, "/outbox"); code != http.StatusNotFound || !strings.Contains(body, "no outbox") {
		t.Errorf("outbox: %d\n%s", code, body)
	}
}

// TestNoPathReachesFiles: paths that name files (or climb out) are not
// found; only the pages and the embedded style sheet are served.
func TestNoPathReachesFiles(t *testing.T) {
	f := uitest.NewFixture(t)
	h := uitest.NewHandler(t, f.Ledger, ui.Options{})
	for _, p := range []string{"/../../etc/passwd", "/templates/layout.html", "/static/style.css", "/style.css/../go.mod", "/" + filepath.Base(f.Path), "/job/x"} {
		if code, body := localGet(t, h, p); code == http.StatusOK {
			t.Errorf("GET %s: 200\n%.200s", p, body)
		}
	}
	if code, body := localGet(t, h, "/style.css"); code != http.StatusOK || !strings.Contains(body, "prefers-color-scheme: dark") {
		t.Errorf("GET /style.css: %d", code)
	}
}

// TestNoScriptPolicyAndRefresh: every page forbids scripts and framing
// (Content-Security-Policy), sends no referrer (a ?token= would leak), and
// the overview reloads itself by a meta refresh (Options.Refresh; never
// when negative).
func TestNoScriptPolicyAndRefresh(t *testing.T) {
	f := uitest.NewFixture(t)
	h := uitest.NewHandler(t, f.Ledger, ui.Options{Refresh: 7 * time.Second})
	for _, p := range []string{"/", "/job?job=settle", "/record?job=pay&period=2026-10-27", "/outbox", "/search", "/nope"} {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, local(httptest.NewRequest(http.MethodGet, p, nil)))
		csp := w.Header().Get("Content-Security-Policy")
		if !strings.Contains(csp, "default-src 'none'") || strings.Contains(csp, "script-src") || !strings.Contains(csp, "frame-ancestors 'none'") {
			t.Errorf("GET %s: Content-Security-Policy %q", p, csp)
		}
		if rp := w.Header().Get("Referrer-Policy"); rp != "no-referrer" {
			t.Errorf("GET %s: Referrer-Policy %q", p, rp)
		}
	}
	if _, body := localGet(t, h, "/"); !strings.Contains(body, `<meta http-equiv="refresh" content="7">`) {
		t.Errorf("the overview does not reload every 7 s:\n%s", body)
	}
	if _, body := localGet(t, h, "/job?job=settle"); strings.Contains(body, `http-equiv="refresh"`) {
		t.Errorf("a job's page reloads itself")
	}
	never := uitest.NewHandler(t, f.Ledger, ui.Options{Refresh: -1})
	if _, body := localGet(t, never, "/"); strings.Contains(body, `http-equiv="refresh"`) {
		t.Errorf("Refresh -1: the overview reloads itself")
	}
}

// TestJobGridMarksCursorDueAndWindow: with the job's schedule known, a
// job's grid marks the latest due period, the catch-up cursor (set by a
// real idem.CatchUp), and the periods between them that catch-up has still
// to settle; the overview says the job is late.
func TestJobGridMarksCursorDueAndWindow(t *testing.T) {
	ctx := context.Background()
	l, err := idem.OpenLedger(filepath.Join(t.TempDir(), "ledger.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	daily := idem.Daily(time.UTC)
	clk := idemtest.NewClock(time.Date(2026, 10, 28, 2, 0, 0, 0, time.UTC))
	if _, err := idem.CatchUp(ctx, l, "settle", daily, func(context.Context, idem.Period) error { return nil }, idem.WithClock(clk)); err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 10, 31, 2, 0, 0, 0, time.UTC)
	h := uitest.NewHandler(t, l, ui.Options{Schedules: map[string]idem.Schedule{"settle": daily}, Now: func() time.Time { return now }})
	_, body := localGet(t, h, "/job?job=settle")
	for _, want := range []string{
		`class="cell c-done cursor" href="record?job=settle&amp;period=2026-10-27"`,
		`class="cell c- window" href="record?job=settle&amp;period=2026-10-28"`,
		`class="cell c- window" href="record?job=settle&amp;period=2026-10-29"`,
		`class="cell c- cur window" href="record?job=settle&amp;period=2026-10-30"`,
		`class="cell c-" href="record?job=settle&amp;period=2026-10-31"`,
		`class="cell c-" href="record?job=settle&amp;period=2026-10-26"`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("the grid has no %s", want)
		}
	}
	if _, body := localGet(t, h, "/"); !strings.Contains(body, `<bdi>2026-10-30</bdi> <span class="s-late">late</span>`) {
		t.Errorf("the overview does not say settle is late for 2026-10-30:\n%s", body)
	}
}
