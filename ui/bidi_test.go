package ui_test

import (
	"context"
	"database/sql"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemstore"
	"github.com/idemgo/idem/outbox"
	"github.com/idemgo/idem/ui"
	"github.com/idemgo/idem/ui/internal/uitest"
)

// rlo is RIGHT-TO-LEFT OVERRIDE: in a stored text it reverses the text
// that follows it, up to the end of its isolate.
const rlo = "\u202e"

// TestStoredTextIsolated: every text the store holds (a job, a period, an
// error, a value, a cursor, a topic, a payload, a message's id and error,
// what a job waits for) is shown in an isolate of its own on every page
// (a <bdi>, or an element with dir="auto", holding that text alone; in a
// page's title or a message made of parts, between U+2068 and U+2069), so
// a right-to-left override in it cannot reorder the page's text after it.
// Each of them holds one here; an input showing one has dir="auto". (Other
// attributes, a link's query or a hidden field's value, are not shown as
// text.)
func TestStoredTextIsolated(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2026, 10, 29, 2, 0, 0, 0, time.UTC)
	l, err := idem.OpenLedger(filepath.Join(t.TempDir(), "ledger.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	job, period, upstream := "ev"+rlo+"il", "2026-10-"+rlo+"27", "up"+rlo+"stream"
	noWait := []idem.Option{idem.RetryWithin(0), idem.WithBackoff(idem.Constant(time.Hour))}
	if err := l.Run(ctx, idem.Key{Job: job, Period: period}, func(context.Context) error {
		return errors.New("bank " + rlo + "timeout")
	}, noWait...); err == nil {
		t.Fatal("a failing Run returned nil")
	}
	if _, err := idem.RunValueOn(ctx, l, idem.Key{Job: job, Period: "2026-10-26"}, func(context.Context) (string, error) {
		return "total " + rlo + "1200", nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := l.RunTx(ctx, idem.Key{Job: job, Period: "2026-10-25"}, func(ctx context.Context, tx *sql.Tx) error {
		_, err := outbox.Put(ctx, tx, outbox.Message{Topic: "to" + rlo + "pic", Payload: []byte("pay" + rlo + "load")})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	var id string
	if _, err := outbox.RelayOnce(ctx, l, outbox.DeliverFunc(func(ctx context.Context, d outbox.Delivery) error {
		id = d.ID
		return idem.Permanent(errors.New("410 " + rlo + "gone"))
	}), outbox.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil)))); err != nil {
		t.Logf("relay: %v", err)
	}
	if id == "" {
		t.Fatal("the relay delivered nothing")
	}
	cs, err := idemstore.Of(l)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cs.(idemstore.CatchUpStore).Start(ctx, job, "2026-09-"+rlo+"30"); err != nil {
		t.Fatal(err)
	}
	h := uitest.NewHandler(t, l, ui.Options{Actions: true, Now: func() time.Time { return now },
		Schedules: map[string]idem.Schedule{job: idem.Daily(time.UTC)},
		After:     map[string][]ui.Dependency{job: {{Job: upstream, Mapping: idem.SamePeriod()}}}})

	key := url.Values{"job": {job}, "period": {period}}.Encode()
	pages := map[string]string{}
	for _, target := range []string{
		"/", "/job?" + url.Values{"job": {job}}.Encode(), "/record?" + key,
		"/record?" + url.Values{"job": {job}, "period": {"2026-10-26"}}.Encode(),
		"/record?" + url.Values{"job": {job}, "period": {"2026-10-25"}}.Encode(),
		"/search?" + key, "/outbox", "/outbox?" + url.Values{"topic": {"to" + rlo + "pic"}}.Encode(),
		"/action?do=reset&" + key, "/action?" + url.Values{"do": {"outbox-retry"}, "id": {id}}.Encode(),
	} {
		code, body := localGet(t, h, target)
		if code != http.StatusOK {
			t.Fatalf("GET %s: %d\n%s", target, code, body)
		}
		pages["GET "+target] = body
	}
	for _, do := range []string{"reset", "resolve-done"} { // done, then refused (a done record cannot be resolved)
		form := url.Values{"do": {do}, "job": {job}, "period": {period}}
		_, confirm := localGet(t, h, "/action?"+form.Encode())
		form.Set("csrf", csrfOf(t, confirm))
		_, body := post(t, h, form)
		pages["POST "+do] = body
	}
	for _, want := range []string{"bank " + rlo + "timeout", "total " + rlo + "1200", "pay" + rlo + "load", "410 " + rlo + "gone",
		"2026-09-" + rlo + "30", "up" + rlo + "stream/"} {
		found := false
		for _, body := range pages {
			found = found || strings.Contains(body, want)
		}
		if !found {
			t.Errorf("no page shows %q: the test does not cover it", want)
		}
	}
	for name, body := range pages {
		for _, where := range notIsolated(body, rlo) {
			t.Errorf("%s: a stored text not isolated: %s", name, where)
		}
	}
}

// notIsolated returns where in page a text holding mark is shown outside
// an isolate of its own: a text between a start tag <bdi> (or one with
// dir="auto") and its end tag, with nothing else in it; a part between
// U+2068 and U+2069; or the value of an input with dir="auto".
func notIsolated(page, mark string) []string {
	var out []string
	for i := 0; ; i++ {
		j := strings.Index(page[i:], mark)
		if j < 0 {
			return out
		}
		i += j
		around := page[max(0, i-80):min(len(page), i+80)]
		lt, gt := strings.LastIndex(page[:i], "<"), strings.LastIndex(page[:i], ">")
		if lt > gt { // in a tag's attribute
			tag := page[lt:]
			tag = tag[:strings.Index(tag, ">")+1]
			if strings.HasPrefix(tag, "<input") && !strings.Contains(tag, `type="hidden"`) && !strings.Contains(tag, `dir="auto"`) {
				out = append(out, "an input without dir=auto: "+tag)
			}
			continue
		}
		text := page[gt+1 : i]
		if strings.LastIndex(text, "\u2068") > strings.LastIndex(text, "\u2069") && strings.Contains(page[i:], "\u2069") {
			continue
		}
		start := page[strings.LastIndex(page[:gt], "<") : gt+1]
		end := i + strings.Index(page[i:], "<")
		name := strings.Fields(strings.Trim(start, "<>"))[0]
		if (start == "<bdi>" || strings.Contains(start, `dir="auto"`)) && strings.HasPrefix(page[end:], "</"+name+">") {
			continue
		}
		out = append(out, "…"+around+"…")
	}
}
