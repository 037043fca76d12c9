package ui_test

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemstore"
	"github.com/idemgo/idem/ui"
	"github.com/idemgo/idem/ui/internal/uitest"
)

// woken returns the jobs woken in the fixture's ledger after mark, and
// the mark to pass next.
func woken(t *testing.T, f *uitest.Fixture, mark int64) ([]string, int64) {
	t.Helper()
	st, err := idemstore.Of(f.Ledger)
	if err != nil {
		t.Fatal(err)
	}
	jobs, next, err := st.(idemstore.Waker).Woken(context.Background(), mark)
	if err != nil {
		t.Fatal(err)
	}
	return jobs, next
}

// TestRunNowAction: a failed period that may run now offers "Run now";
// its confirmation's POST wakes the job's Schedulers (a wake mark in the
// store). A done, parked or unknown period is refused, naming what fits,
// and wakes nothing; the token of another action does not do it; with
// actions off it is refused.
func TestRunNowAction(t *testing.T) {
	f := uitest.NewFixture(t)
	h := uitest.NewHandler(t, f.Ledger, ui.Options{Actions: true})
	// A period that failed, whose backoff is over. One attempt: retried in
	// the call, a backoff of a microsecond would fail it again and again
	// for DefaultRetryWithin's minute (thousands of synced writes).
	due := idem.Key{Job: "settle", Period: "2020-01-01"}
	if err := f.Ledger.Run(context.Background(), due, func(context.Context) error { return errors.New("bank closed") },
		idem.WithBackoff(idem.Constant(time.Microsecond)), idem.OneAttempt()); err == nil {
		t.Fatal("the failing run did not fail")
	}
	if _, body := localGet(t, h, "/record?job=settle&period=2020-01-01"); !strings.Contains(body, `id="run-now"`) {
		t.Errorf("the record page of a failed period past its backoff offers no run now:\n%s", body)
	}
	for _, p := range []string{"2026-10-25", "2026-10-26", "2026-10-27"} {
		if _, body := localGet(t, h, "/record?job=settle&period="+p); strings.Contains(body, `id="run-now"`) {
			t.Errorf("the record page of settle %s (done, backing off, parked) offers run now:\n%s", p, body)
		}
	}
	_, mark := woken(t, f, 0)
	for _, tc := range []struct{ period, want string }{
		{"2026-10-25", "is done: to run it again on purpose (to repair data), re-run it"},
		{"2026-10-26", "is backing off until"},
		{"2026-10-27", "is parked: fix the cause, then reset it"},
	} {
		form := url.Values{"do": {ui.RunNow}, "job": {"settle"}, "period": {tc.period}}
		_, page := localGet(t, h, "/action?"+form.Encode())
		form.Set("csrf", csrfOf(t, page))
		if code, body := post(t, h, form); code != http.StatusConflict || !strings.Contains(body, tc.want) {
			t.Errorf("run now of settle %s: %d, want 409 with %q:\n%s", tc.period, code, tc.want, body)
		}
	}
	form := url.Values{"do": {ui.RunNow}, "job": {"settle"}, "period": {"2020-01-01"}}
	_, resetPage := localGet(t, h, "/action?do=reset&job=settle&period=2020-01-01")
	form.Set("csrf", csrfOf(t, resetPage))
	if code, body := post(t, h, form); code != http.StatusForbidden || !strings.Contains(body, "CSRF") {
		t.Errorf("run now with the reset's token: %d\n%s", code, body)
	}
	off := uitest.NewHandler(t, f.Ledger, ui.Options{})
	if code, _ := localGet(t, off, "/action?do=run-now&job=settle&period=2020-01-01"); code != http.StatusForbidden {
		t.Errorf("run now with actions off: %d, want 403", code)
	}
	if jobs, _ := woken(t, f, mark); len(jobs) > 0 {
		t.Fatalf("refused run-now actions woke %v", jobs)
	}
	_, page := localGet(t, h, "/action?do=run-now&job=settle&period=2020-01-01")
	form.Set("csrf", csrfOf(t, page))
	if code, body := post(t, h, form); code != http.StatusOK || !strings.Contains(body, "run-now done") {
		t.Fatalf("run now of settle 2020-01-01: %d\n%s", code, body)
	}
	if jobs, _ := woken(t, f, mark); strings.Join(jobs, " ") != "settle" {
		t.Errorf("jobs woken by run now: %v, want settle", jobs)
	}
}

var requestIDField = regexp.MustCompile(`name="id" value="([^"]+)"`)

// TestRerunAction: a done period offers "Re-run"; its confirmation page
// asks for a reason and carries a request id; the POST without a reason
// is refused (400); with one, the period gets revision 1, and the same
// form posted again (a double click) re-runs nothing more ("seen
// before"). A token is good for its request id only. The reason, HTML,
// shows as text. A parked period is refused, naming reset.
func TestRerunAction(t *testing.T) {
	f := uitest.NewFixture(t)
	h := uitest.NewHandler(t, f.Ledger, ui.Options{Actions: true})
	key := idem.Key{Job: "settle", Period: "2026-10-25"}
	q := url.Values{"job": {key.Job}, "period": {key.Period}}.Encode()
	if _, body := localGet(t, h, "/record?"+q); !strings.Contains(body, `id="rerun"`) {
		t.Errorf("the record page of a done period offers no re-run:\n%s", body)
	}
	_, page := localGet(t, h, "/action?do=rerun&"+q)
	if miss := uitest.Has(page, `name="reason"`, `name="id" value="ui-`); miss != "" {
		t.Fatalf("the re-run's confirmation page has no %q:\n%s", miss, page)
	}
	id := requestIDField.FindStringSubmatch(page)[1]
	_, other := localGet(t, h, "/action?do=rerun&"+q)
	if otherID := requestIDField.FindStringSubmatch(other)[1]; otherID == id {
		t.Fatalf("two confirmation pages share the request id %s", id)
	}
	form := url.Values{"do": {ui.Rerun}, "job": {key.Job}, "period": {key.Period}, "id": {id}, "csrf": {csrfOf(t, page)}}
	if code, body := post(t, h, form); code != http.StatusBadRequest || !strings.Contains(body, "needs a reason") {
		t.Errorf("re-run without a reason: %d, want 400:\n%s", code, body)
	}
	form.Set("reason", "<script>alert(5)</script> flow table corrected")
	stolen := url.Values{"do": {ui.Rerun}, "job": {key.Job}, "period": {key.Period}, "id": {"ui-mine"}, "reason": {"x"}, "csrf": {csrfOf(t, page)}}
	if code, body := post(t, h, stolen); code != http.StatusForbidden || !strings.Contains(body, "CSRF") {
		t.Errorf("re-run with another request id's token: %d, want 403:\n%s", code, body)
	}
	if rec := lookup(t, f, key); rec.Revision != 0 || rec.Status != idem.StatusDone {
		t.Fatalf("after refused re-runs: %s revision %d, want done, revision 0", rec.Status, rec.Revision)
	}
	if code, body := post(t, h, form); code != http.StatusOK || !strings.Contains(body, "revision 1, queued") {
		t.Fatalf("re-run: %d, want revision 1 queued:\n%s", code, body)
	}
	if code, body := post(t, h, form); code != http.StatusOK || !strings.Contains(body, "revision 1, seen before") {
		t.Errorf("the same re-run posted again: %d, want seen before:\n%s", code, body)
	}
	if rec := lookup(t, f, key); rec.Revision != 1 || rec.Status != idem.StatusFailed {
		t.Errorf("after the re-run: %s revision %d, want failed (runnable), revision 1", rec.Status, rec.Revision)
	}
	if _, body := localGet(t, h, "/record?"+q); strings.Contains(body, "<script") || !strings.Contains(body, "&lt;script&gt;alert(5)") {
		t.Errorf("the record page after the re-run does not show its reason as text:\n%s", body)
	}
	parked := url.Values{"do": {ui.Rerun}, "job": {"settle"}, "period": {"2026-10-27"}, "reason": {"x"}}
	_, page = localGet(t, h, "/action?"+parked.Encode())
	parked.Set("id", requestIDField.FindStringSubmatch(page)[1])
	parked.Set("csrf", csrfOf(t, page))
	if code, body := post(t, h, parked); code != http.StatusConflict || !strings.Contains(body, "reset it") {
		t.Errorf("re-run of a parked period: %d, want 409 naming reset:\n%s", code, body)
	}
}

func lookup(t *testing.T, f *uitest.Fixture, key idem.Key) idem.Record {
	t.Helper()
	rec, ok, err := f.Ledger.Lookup(context.Background(), key)
	if err != nil || !ok {
		t.Fatalf("Lookup %s: %v, %v", key, ok, err)
	}
	return rec
}

// TestRecordHistory: a record's page shows its history: the re-run
// requests (who, why, the request id) and every attempt that ended, by
// revision, with what the store holds escaped.
func TestRecordHistory(t *testing.T) {
	f := uitest.NewFixture(t)
	h := uitest.NewHandler(t, f.Ledger, ui.Options{})
	ctx := context.Background()
	key := idem.Key{Job: "hist", Period: "2026-10-01"}
	fails := true
	fn := func(context.Context) error {
		if fails {
			fails = false
			return errors.New(`bank said <b>no</b>`)
		}
		return nil
	}
	opts := idem.WithBackoff(idem.Constant(time.Microsecond))
	for range 2 {
		if err := f.Ledger.Run(ctx, key, fn, opts); err == nil {
			break
		}
		time.Sleep(time.Millisecond) // past the backoff of a microsecond
	}
	req := idem.RerunRequest{Keys: []idem.Key{key}, RequestID: "fix-<1>", Reason: `flow table <script>x()</script> corrected`, By: "ops&co"}
	if _, err := idem.Rerun(ctx, f.Ledger, req); err != nil {
		t.Fatal(err)
	}
	if err := f.Ledger.Run(ctx, key, fn); err != nil {
		t.Fatal(err)
	}
	_, body := localGet(t, h, "/record?job=hist&period=2026-10-01")
	i := strings.Index(body, "<h2>History</h2>")
	if i < 0 {
		t.Fatalf("the record page has no history:\n%s", body)
	}
	hist := body[i:]
	hist = hist[:strings.Index(hist, "<h2>Items</h2>")]
	for _, want := range []string{
		"Revision 1 now",
		`flow table &lt;script&gt;x()&lt;/script&gt; corrected`, "ops&amp;co", "fix-&lt;1&gt;",
		`<td>0</td><td>1</td><td><span class="s-failed">failed</span>`, "bank said &lt;b&gt;no&lt;/b&gt;",
		`<td>0</td><td>2</td><td><span class="s-done">done</span>`,
		`<td>1</td><td>3</td><td><span class="s-done">done</span>`,
	} {
		if !strings.Contains(hist, want) {
			t.Errorf("the history lacks %q:\n%s", want, hist)
		}
	}
	if strings.Contains(body, "<script>x()") || strings.Contains(body, "<b>no</b>") {
		t.Errorf("the page shows the store's text unescaped:\n%s", hist)
	}
}
