package browsertest_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemstore"
	"github.com/idemgo/idem/internal/testwait"
	"github.com/idemgo/idem/ui"
	"github.com/idemgo/idem/ui/internal/uitest"
)

// EnvChromium names the browser the tests drive when it is not Debian's
// chromium on $PATH.
const EnvChromium = "IDEM_CHROMIUM"

// chromium returns the browser's path. Without one the test is skipped
// with a line saying how to run it, unless $CI is set: then it fails.
func chromium(t *testing.T) string {
	t.Helper()
	if p := os.Getenv(EnvChromium); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	const how = "no chromium on $PATH: install it (apt-get install chromium) or set $" + EnvChromium + " to run the browser tests"
	if v := os.Getenv("CI"); v != "" && v != "false" && v != "0" {
		t.Fatal(how + " ($CI is set: the browser tests must run)")
	}
	t.Skip(how)
	return ""
}

// browser starts a headless Chromium for t (stopped at its end) and
// returns its tab's context. Everything the tab does ends by the test's
// wait limit (testwait.Limit): a step that does not come fails t, saying
// which. With scriptOff the tab runs no JavaScript.
func browser(t *testing.T, scriptOff bool) context.Context {
	t.Helper()
	path := chromium(t)
	limit, cancelLimit := context.WithTimeout(context.Background(), testwait.Limit(t))
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(path), chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1200, 900))
	alloc, cancelAlloc := chromedp.NewExecAllocator(limit, opts...)
	ctx, cancelCtx := chromedp.NewContext(alloc)
	t.Cleanup(func() { cancelCtx(); cancelAlloc(); cancelLimit() })
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("starting %s (headless): %v", path, err)
	}
	var mu sync.Mutex
	dialogs := chromedp.Events(ctx, page.JavascriptDialogOpening)
	go func() {
		for ev, err := range dialogs {
			if err != nil {
				return
			}
			mu.Lock()
			t.Errorf("a page opened a JavaScript dialog: %q", ev.Message)
			mu.Unlock()
			_, _ = chromedp.Call(ctx, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: true})
		}
	}()
	if scriptOff {
		if _, err := chromedp.Call(ctx, emulation.SetScriptExecutionDisabled, emulation.SetScriptExecutionDisabledParams{Value: true}); err != nil {
			t.Fatalf("disabling JavaScript: %v", err)
		}
	}
	return ctx
}

// step runs the browser actions, failing t with what they were for.
func step(t *testing.T, ctx context.Context, what string, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	if err := chromedp.Do(ctx, actions...); err != nil {
		t.Fatalf("browser: %s: %v", what, err)
	}
}

// text returns the text of the first element sel matches, waiting for it
// (within the tab's deadline).
func text(t *testing.T, ctx context.Context, sel string) string {
	t.Helper()
	s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
	if err != nil {
		t.Fatalf("browser: the text of %s: %v", sel, err)
	}
	return s
}

// html returns the page's HTML as the browser holds it (DOM.getOuterHTML:
// no script runs).
func html(t *testing.T, ctx context.Context) string {
	t.Helper()
	s, err := chromedp.Run(ctx, chromedp.OuterHTML(chromedp.CSS("html")))
	if err != nil {
		t.Fatalf("browser: the page's HTML: %v", err)
	}
	return s
}

func serve(t *testing.T, s ui.Store, o ui.Options) string {
	t.Helper()
	srv := httptest.NewServer(uitest.NewHandler(t, s, o))
	t.Cleanup(srv.Close)
	return srv.URL + "/"
}

func recordURL(base string, k idem.Key) string {
	return base + "record?" + url.Values{"job": {k.Job}, "period": {k.Period}}.Encode()
}

// TestBrowserPages loads each page in a real headless Chromium: the
// overview with every job, a job's grid, a record (done, failed, parked,
// unknown, a fan-out's items, its outbox messages), the outbox and a
// search; and clicks from the overview to a record.
func TestBrowserPages(t *testing.T) {
	f := uitest.NewFixture(t)
	base := serve(t, f.Ledger, ui.Options{})
	ctx := browser(t, false)

	step(t, ctx, "open the overview", chromedp.Navigate(base), chromedp.WaitVisible(chromedp.CSS("#jobs")))
	jobs := text(t, ctx, "#jobs")
	if miss := uitest.Has(jobs, "settle", "pay", "grant", "notify", uitest.XSSJob, "2026-10-25", "2/3 done 1 parked"); miss != "" {
		t.Errorf("the overview has no %q:\n%s", miss, jobs)
	}
	if miss := uitest.Has(text(t, ctx, "#topics"), "mail", "hooks"); miss != "" {
		t.Errorf("the overview's outbox has no %q", miss)
	}

	// Click through: overview, job pay, its 2026-10-27 cell, the record.
	step(t, ctx, "click job pay",
		chromedp.Click(chromedp.CSS(`a.job[href="job?job=pay"]`)),
		chromedp.WaitVisible(chromedp.CSS("#grid")))
	if h1 := text(t, ctx, "h1"); h1 != "Job pay" {
		t.Errorf("after the click the heading is %q, want Job pay", h1)
	}
	step(t, ctx, "click the cell of 2026-10-27",
		chromedp.Click(chromedp.CSS(`a.cell.c-unknown[title^="2026-10-27"]`)),
		chromedp.WaitVisible(chromedp.CSS("#status")))
	if s := text(t, ctx, "#status"); s != "unknown" {
		t.Errorf("the record reached by clicks is %q, want unknown", s)
	}
	if loc, _ := chromedp.Run(ctx, chromedp.Location()); !strings.HasSuffix(loc, "record?job=pay&period=2026-10-27") {
		t.Errorf("the clicks ended at %s", loc)
	}

	for _, tc := range []struct {
		key  idem.Key
		want []string
	}{
		{idem.Key{Job: "settle", Period: "2026-10-25"}, []string{"done", `{"total":1200}`}},
		{idem.Key{Job: "settle", Period: "2026-10-26"}, []string{"failed", "bank timeout", "backoff until"}},
		{idem.Key{Job: "settle", Period: "2026-10-27"}, []string{"parked", "account closed"}},
		{idem.Key{Job: "pay", Period: "2026-10-27"}, []string{"unknown", "connection reset while paying"}},
		{idem.Key{Job: "grant", Period: "2026-10-27"}, []string{"done", "total\t3", "parked\t1"}},
		{idem.Key{Job: "notify", Period: "2026-10-27"}, []string{"delivered", "pending", "parked", "503 unavailable", uitest.XSSBody}},
	} {
		step(t, ctx, "open "+tc.key.String(), chromedp.Navigate(recordURL(base, tc.key)), chromedp.WaitVisible(chromedp.CSS("#record")))
		body := text(t, ctx, "main")
		if miss := uitest.Has(body, tc.want...); miss != "" {
			t.Errorf("%s's page has no %q:\n%s", tc.key, miss, body)
		}
	}

	step(t, ctx, "open the job grid of settle", chromedp.Navigate(base+"job?job=settle"), chromedp.WaitVisible(chromedp.CSS("#grid")))
	for period, class := range map[string]string{"2026-10-20": "c-done", "2026-10-26": "c-failed", "2026-10-27": "c-parked", "2026-10-01": "c-"} {
		sel := fmt.Sprintf(`a.cell.%s[title^="%s"]`, class, period)
		if n, err := chromedp.Run(ctx, chromedp.Nodes(chromedp.CSS(sel), chromedp.AtLeast(0))); err != nil || len(n) != 1 {
			t.Errorf("the grid has %d cells %s (%v), want 1", len(n), sel, err)
		}
	}

	step(t, ctx, "open the outbox", chromedp.Navigate(base+"outbox"), chromedp.WaitVisible(chromedp.CSS(".messages")))
	if miss := uitest.Has(text(t, ctx, "main"), "mail", "hooks", "410 gone", "delivered", "parked"); miss != "" {
		t.Errorf("the outbox page has no %q", miss)
	}
	step(t, ctx, "search settle 2026-10-2",
		chromedp.Navigate(base+"search"),
		chromedp.SendKeys(chromedp.CSS(`input[name="job"]`), "settle"),
		chromedp.SendKeys(chromedp.CSS(`input[name="period"]`), "2026-10-2"),
		chromedp.Click(chromedp.CSS(`form.search button`)),
		chromedp.WaitVisible(chromedp.CSS("#results")))
	if res := text(t, ctx, "#results"); strings.Count(res, "settle") != 8 || strings.Contains(res, "pay") {
		t.Errorf("search settle 2026-10-2 found:\n%s\nwant the 8 periods of settle", res)
	}
}

// TestBrowserActions performs each action in the browser, through its
// confirmation page, and sees the store change: resolve done (pay),
// resolve retry and reset (settle), outbox retry (the parked message) and
// drop (the failing one). A POST whose CSRF token was removed is refused.
func TestBrowserActions(t *testing.T) {
	f := uitest.NewFixture(t)
	base := serve(t, f.Ledger, ui.Options{Actions: true})
	ctx := browser(t, false)
	bg := context.Background()

	act := func(key idem.Key, button string) {
		t.Helper()
		step(t, ctx, "open "+key.String(), chromedp.Navigate(recordURL(base, key)), chromedp.WaitVisible(chromedp.CSS("#record")))
		step(t, ctx, "click "+button, chromedp.Click(chromedp.CSS("#"+button)), chromedp.WaitVisible(chromedp.CSS("#confirm")))
		if got := text(t, ctx, "#target"); got != key.Job+" "+key.Period {
			t.Errorf("the confirmation names %q, want %q", got, key.Job+" "+key.Period)
		}
		step(t, ctx, "confirm "+button, chromedp.Click(chromedp.CSS("#confirm")), chromedp.WaitVisible(chromedp.CSS("#message")))
		if msg := text(t, ctx, "#message"); !strings.HasSuffix(msg, button+" done") {
			t.Errorf("after %s on %s: %q", button, key, msg)
		}
	}

	// A POST without its token: the form's csrf field emptied.
	pay := idem.Key{Job: "pay", Period: "2026-10-27"}
	step(t, ctx, "open pay", chromedp.Navigate(recordURL(base, pay)), chromedp.WaitVisible(chromedp.CSS("#record")))
	step(t, ctx, "resolve pay without a token",
		chromedp.Click(chromedp.CSS("#resolve-done")), chromedp.WaitVisible(chromedp.CSS("#confirm")),
		chromedp.SetAttributeValue(chromedp.CSS(`input[name="csrf"]`), "value", ""),
		chromedp.Click(chromedp.CSS("#confirm")), chromedp.WaitVisible(chromedp.CSS("#message")))
	if msg := text(t, ctx, "#message"); !strings.Contains(msg, "CSRF") {
		t.Errorf("a POST without its token: %q", msg)
	}
	if s := f.Status(t, pay); s != idem.StatusUnknown {
		t.Fatalf("after a POST without its token pay is %s", s)
	}

	act(pay, ui.ResolveDone)
	if s := f.Status(t, pay); s != idem.StatusDone {
		t.Errorf("after resolve-done pay is %s", s)
	}
	failed := idem.Key{Job: "settle", Period: "2026-10-26"}
	act(failed, ui.ResolveRetry)
	if rec, _, _ := f.Ledger.Lookup(bg, failed); rec.Status != idem.StatusFailed || rec.Failures != 0 || !rec.NotBefore.IsZero() && rec.NotBefore.After(time.Now()) {
		t.Errorf("after resolve-retry: %+v, want failed, 0 failures, due now", rec)
	}
	parked := idem.Key{Job: "settle", Period: "2026-10-27"}
	act(parked, ui.Reset)
	if rec, _, _ := f.Ledger.Lookup(bg, parked); rec.Status != idem.StatusFailed || rec.Failures != 0 {
		t.Errorf("after reset: %+v, want failed (runnable), 0 failures", rec)
	}

	outboxAct := func(do, id string) {
		t.Helper()
		step(t, ctx, do+" "+id, chromedp.Navigate(base+"outbox"),
			chromedp.Click(chromedp.CSS(fmt.Sprintf(`button[data-do="%s"][data-id="%s"]`, do, id))),
			chromedp.WaitVisible(chromedp.CSS("#confirm")))
		if got := text(t, ctx, "#target"); !strings.Contains(got, id) {
			t.Errorf("the confirmation names %q, want the message %s", got, id)
		}
		step(t, ctx, "confirm "+do, chromedp.Click(chromedp.CSS("#confirm")), chromedp.WaitVisible(chromedp.CSS("#message")))
		if msg := text(t, ctx, "#message"); !strings.HasSuffix(msg, do+" done") {
			t.Errorf("after %s of %s: %q", do, id, msg)
		}
	}
	outboxAct(ui.OutboxRetry, f.Parked)
	if msgs, err := f.Ledger.ListOutbox(bg, idemstore.OutboxFilter{ID: f.Parked}); err != nil || len(msgs) != 1 || msgs[0].Status != idemstore.OutboxPending {
		t.Errorf("after outbox-retry: %+v, %v; want pending", msgs, err)
	}
	outboxAct(ui.OutboxDrop, f.Failed)
	if msgs, err := f.Ledger.ListOutbox(bg, idemstore.OutboxFilter{ID: f.Failed}); err != nil || len(msgs) != 0 {
		t.Errorf("after outbox-drop: %+v, %v; want none", msgs, err)
	}
}

// TestBrowserRefusals: actions of a handler without Options.Actions are
// refused in the browser, and its pages offer none; a handler with a token
// refuses the browser until it visits with ?token=, then serves it (the
// cookie).
func TestBrowserRefusals(t *testing.T) {
	f := uitest.NewFixture(t)
	ctx := browser(t, false)
	base := serve(t, f.Ledger, ui.Options{})
	pay := idem.Key{Job: "pay", Period: "2026-10-27"}
	step(t, ctx, "open pay", chromedp.Navigate(recordURL(base, pay)), chromedp.WaitVisible(chromedp.CSS("#record")))
	if n, _ := chromedp.Run(ctx, chromedp.Nodes(chromedp.CSS("#resolve-done"), chromedp.AtLeast(0))); len(n) != 0 {
		t.Errorf("actions off, yet the record offers resolve")
	}
	step(t, ctx, "open an action", chromedp.Navigate(base+"action?do=resolve-done&job=pay&period=2026-10-27"), chromedp.WaitVisible(chromedp.CSS("#message")))
	if msg := text(t, ctx, "#message"); !strings.Contains(msg, "actions are off") {
		t.Errorf("an action with actions off: %q", msg)
	}

	tbase := serve(t, f.Ledger, ui.Options{Token: "s3cret"})
	step(t, ctx, "open without the token", chromedp.Navigate(tbase+"job?job=settle"), chromedp.WaitVisible(chromedp.CSS("#message")))
	if msg := text(t, ctx, "#message"); !strings.Contains(msg, "needs its token") {
		t.Errorf("without the token: %q", msg)
	}
	step(t, ctx, "open with ?token=", chromedp.Navigate(tbase+"job?job=settle&token=s3cret"), chromedp.WaitVisible(chromedp.CSS("#grid")))
	if loc, _ := chromedp.Run(ctx, chromedp.Location()); strings.Contains(loc, "token") {
		t.Errorf("the token stayed in the address bar: %s", loc)
	}
	step(t, ctx, "open the overview with the cookie", chromedp.Navigate(tbase), chromedp.WaitVisible(chromedp.CSS("#jobs")))
	if s := f.Status(t, pay); s != idem.StatusUnknown {
		t.Errorf("pay is %s after refused actions", s)
	}
}

// TestBrowserXSS: a job name, an error, a stored value and an outbox
// payload that are HTML render as text in the browser: the elements hold
// them as text, no script or img element is in any page, and no dialog
// opens (browser fails the test on one).
func TestBrowserXSS(t *testing.T) {
	f := uitest.NewFixture(t)
	base := serve(t, f.Ledger, ui.Options{Actions: true})
	ctx := browser(t, false)
	xk := idem.Key{Job: uitest.XSSJob, Period: "2026-10-27"}
	for _, tc := range []struct {
		url, sel, want string
	}{
		{base, `#jobs a.job[href^="job?job=%3Cscript"]`, uitest.XSSJob},
		{base + "job?" + url.Values{"job": {uitest.XSSJob}}.Encode(), "h1", "Job " + uitest.XSSJob},
		{recordURL(base, xk), "#job", uitest.XSSJob},
		{recordURL(base, xk), "#lasterror", uitest.XSSError},
		{recordURL(base, idem.Key{Job: "xss", Period: "2026-10-27"}), "#value", `"\u003cscript\u003ealert(3)\u003c/script\u003e"`},
		{base + "outbox?topic=mail", "code.payload", "first"},
		{base + "action?" + url.Values{"do": {"reset"}, "job": {uitest.XSSJob}, "period": {"2026-10-27"}}.Encode(), "#target", uitest.XSSJob + " 2026-10-27"},
	} {
		step(t, ctx, "open "+tc.url, chromedp.Navigate(tc.url), chromedp.WaitVisible(chromedp.CSS("main")))
		if got := text(t, ctx, tc.sel); got != tc.want {
			t.Errorf("%s: %s holds %q, want the text %q", tc.url, tc.sel, got, tc.want)
		}
		for _, tag := range []string{"script", "img", "b"} {
			if n, _ := chromedp.Run(ctx, chromedp.Nodes(chromedp.CSS(tag), chromedp.AtLeast(0))); len(n) != 0 {
				t.Errorf("%s: %d %s elements, want none", tc.url, len(n), tag)
			}
		}
	}
	step(t, ctx, "open the outbox", chromedp.Navigate(base+"outbox?topic=mail&status=pending"), chromedp.WaitVisible(chromedp.CSS(".messages")))
	if got := text(t, ctx, ".messages tbody tr code.payload"); got != uitest.XSSBody {
		t.Errorf("the pending payload shows as %q, want the text %q", got, uitest.XSSBody)
	}
}

// TestBrowserNoScript: with JavaScript disabled every page still shows
// its content (the pages need none).
func TestBrowserNoScript(t *testing.T) {
	f := uitest.NewFixture(t)
	base := serve(t, f.Ledger, ui.Options{Actions: true})
	ctx := browser(t, true)
	// Scripts are off in this tab: a page's script does not run.
	step(t, ctx, "open a page with a script", chromedp.Navigate(`data:text/html,<title>off</title><script>document.title="ran"</script>`))
	if title, err := chromedp.Run(ctx, chromedp.Title()); err != nil || title != "off" {
		t.Fatalf("a page's script ran (title %q, %v): JavaScript is not off", title, err)
	}
	for _, tc := range []struct {
		path string
		want []string
	}{
		{"", []string{"settle", "pay", "grant", "notify", "hooks"}},
		{"job?job=settle", []string{"2026-10", "bank timeout", "account closed"}},
		{"record?job=grant&period=2026-10-27", []string{"done", "parked", "complete"}},
		{"record?job=notify&period=2026-10-27", []string{"503 unavailable", "410 gone"}},
		{"outbox", []string{"mail", "hooks", "delivered"}},
		{"search?job=settle&period=2026-10-2", []string{"2026-10-20", "2026-10-27"}},
		{"action?do=resolve-done&job=pay&period=2026-10-27", []string{"<bdi>pay</bdi> <bdi>2026-10-27</bdi>", "Resolve as done"}},
	} {
		step(t, ctx, "open "+tc.path, chromedp.Navigate(base+tc.path), chromedp.WaitReady(chromedp.CSS("footer")))
		body := html(t, ctx)
		if miss := uitest.Has(body, tc.want...); miss != "" {
			t.Errorf("%s with JavaScript off: no %q in\n%s", tc.path, miss, body)
		}
	}
	// And a form works without script: resolve pay through its confirmation.
	step(t, ctx, "resolve pay with JavaScript off", chromedp.Navigate(base+"record?job=pay&period=2026-10-27"),
		chromedp.Click(chromedp.CSS("#resolve-done")), chromedp.WaitReady(chromedp.CSS("#confirm")),
		chromedp.Click(chromedp.CSS("#confirm")), chromedp.WaitReady(chromedp.CSS("#message")))
	if s := f.Status(t, idem.Key{Job: "pay", Period: "2026-10-27"}); s != idem.StatusDone {
		t.Errorf("pay resolved with JavaScript off is %s, want done", s)
	}
}

// TestBrowserRunNowAndRerun: "Run now" on a failed period past its
// backoff wakes the job's Schedulers (a wake mark in the store); "Re-run"
// on a done period asks for a reason, typed in the browser, and gives the
// period revision 1; a double click on the re-run's confirm button
// re-runs it once (Chromium sends the form once; a form sent twice is
// re-run once by its request id: TestRerunAction).
func TestBrowserRunNowAndRerun(t *testing.T) {
	f := uitest.NewFixture(t)
	var logs syncBuffer
	base := serve(t, f.Ledger, ui.Options{Actions: true, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	ctx := browser(t, false)
	bg := context.Background()
	st, err := idemstore.Of(f.Ledger)
	if err != nil {
		t.Fatal(err)
	}
	waker := st.(idemstore.Waker)
	_, mark, err := waker.Woken(bg, 0)
	if err != nil {
		t.Fatal(err)
	}

	// A failed period past its backoff, failed once (OneAttempt: see the ui
	// module's TestRunNowAction).
	due := idem.Key{Job: "settle", Period: "2020-01-01"}
	if err := f.Ledger.Run(bg, due, func(context.Context) error { return errors.New("bank closed") },
		idem.WithBackoff(idem.Constant(time.Microsecond)), idem.OneAttempt()); err == nil {
		t.Fatal("the failing run did not fail")
	}
	step(t, ctx, "open "+due.String(), chromedp.Navigate(recordURL(base, due)), chromedp.WaitVisible(chromedp.CSS("#record")))
	step(t, ctx, "click run-now", chromedp.Click(chromedp.CSS("#run-now")), chromedp.WaitVisible(chromedp.CSS("#confirm")))
	step(t, ctx, "confirm run-now", chromedp.Click(chromedp.CSS("#confirm")), chromedp.WaitVisible(chromedp.CSS("#message")))
	if msg := text(t, ctx, "#message"); !strings.Contains(msg, "run-now done") {
		t.Errorf("after run now: %q", msg)
	}
	if jobs, _, err := waker.Woken(bg, mark); err != nil || strings.Join(jobs, " ") != "settle" {
		t.Errorf("jobs woken by run now: %v, %v; want settle", jobs, err)
	}

	for _, tc := range []struct {
		key    idem.Key
		double bool
	}{
		{idem.Key{Job: "settle", Period: "2026-10-25"}, false},
		{idem.Key{Job: "settle", Period: "2026-10-24"}, true},
	} {
		step(t, ctx, "open "+tc.key.String(), chromedp.Navigate(recordURL(base, tc.key)), chromedp.WaitVisible(chromedp.CSS("#record")))
		step(t, ctx, "click rerun", chromedp.Click(chromedp.CSS("#rerun")), chromedp.WaitVisible(chromedp.CSS("#reason")))
		click := chromedp.Click(chromedp.CSS("#confirm"))
		if tc.double {
			click = chromedp.DoubleClick(chromedp.CSS("#confirm"))
		}
		step(t, ctx, "give a reason and confirm", chromedp.SendKeys(chromedp.CSS("#reason"), "<b>flow</b> table corrected"),
			click, chromedp.WaitVisible(chromedp.CSS("#message")))
		if msg := text(t, ctx, "#message"); !strings.Contains(msg, "rerun done: revision 1") {
			t.Errorf("after re-run of %s (double click %v): %q", tc.key, tc.double, msg)
		}
		rec, _, err := f.Ledger.Lookup(bg, tc.key)
		if err != nil || rec.Revision != 1 || rec.Status != idem.StatusFailed || !strings.Contains(rec.LastError, "<b>flow</b> table corrected") {
			t.Errorf("after re-run of %s (double click %v): %+v, %v; want revision 1, runnable, the reason in its note", tc.key, tc.double, rec, err)
		}
	}
	t.Logf("the handler's log:\n%s", logs.String())
}

// syncBuffer is a bytes.Buffer safe for the handler's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
