//go:build unix

package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"net/http"
	"net/url"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/internal/testwait"
	"github.com/idemgo/idem/pgledger"
	"github.com/idemgo/idem/redisstore"
	"github.com/idemgo/idem/ui"
	"github.com/jackc/pgx/v5"
)

// TestUIRefusesOpenBindWithoutToken: --addr on every interface (or any
// address that is not loopback) without --token or --insecure is a usage
// error that names the flags, and nothing is served.
func TestUIRefusesOpenBindWithoutToken(t *testing.T) {
	t.Setenv(EnvUIToken, "")
	path := filepath.Join(t.TempDir(), "ledger.db")
	for _, addr := range []string{":0", "0.0.0.0:0", "192.0.2.1:0"} {
		var out, errb strings.Builder
		code := execute([]string{"ui", "--ledger", path, "--addr", addr}, &out, &errb)
		if code != exitUsage || !strings.Contains(errb.String(), "is not a loopback address: pass --token") {
			t.Errorf("ui --addr %s: exit %d, stderr %q", addr, code, errb.String())
		}
	}
	var out, errb strings.Builder
	if code := execute([]string{"ui", "--ledger", path, "--addr", ":0", "--token", "t", "--insecure"}, &out, &errb); code != exitUsage {
		t.Errorf("--token with --insecure: exit %d, %q", code, errb.String())
	}
}

// TestUIServes: idem ui serves the ledger's overview on loopback (the
// address it prints), read-only by default (an action is refused), and
// stops on its context's end (as on SIGINT).
func TestUIServes(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger.db")
	l, err := idem.OpenLedger(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Run(context.Background(), idem.Key{Job: "settle", Period: "2026-10-27"}, func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
	l.Close()
	_, get, _, stop := serveUI(t, "--ledger", path, "--schedule", "settle=daily", "--tz", "UTC")
	if code, body := get(""); code != http.StatusOK || !strings.Contains(body, "settle") || !strings.Contains(body, "late") {
		t.Errorf("overview: %d\n%s", code, body)
	}
	if code, body := get("action?do=resolve-done&job=settle&period=2026-10-27"); code != http.StatusForbidden || !strings.Contains(body, "actions are off") {
		t.Errorf("an action without --actions: %d\n%s", code, body)
	}
	stop()
}

// TestUIAfter: with --schedule and --after, the overview says what a job's
// next period waits for; a bad --after is a usage error naming the flag.
func TestUIAfter(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger.db")
	l, err := idem.OpenLedger(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Run(context.Background(), idem.Key{Job: "settle", Period: "2026-10-27"}, func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
	l.Close()
	_, get, _, stop := serveUI(t, "--ledger", path, "--schedule", "mail=daily", "--after", "mail=settle", "--tz", "UTC")
	// Yesterday's mail waits for yesterday's settlement (as of the page's
	// time: the test does not compute the day, which may change meanwhile).
	waits := regexp.MustCompile(`(\d{4}-\d\d-\d\d) waits for settle/(\d{4}-\d\d-\d\d) \(not run yet\)`)
	code, body := get("")
	m := waits.FindStringSubmatch(body)
	if code != http.StatusOK || m == nil || m[1] != m[2] || m[1] == "2026-10-27" {
		t.Errorf("overview: %d, want mail's latest due day waiting for the same day of settle\n%s", code, body)
	}
	stop()
	for _, bad := range []string{"mail", "mail=mail", "mail=settle/fortnightly"} {
		root := newRoot()
		var errb bytes.Buffer
		root.SetArgs([]string{"ui", "--ledger", path, "--after", bad})
		root.SetErr(&errb)
		root.SetOut(io.Discard)
		if err := root.Execute(); err == nil || !strings.Contains(err.Error()+errb.String(), "--after") {
			t.Errorf("--after %q: %v %s; want a usage error naming --after", bad, err, errb.String())
		}
	}
}

// serveUI runs idem ui with args (and --addr 127.0.0.1:0) in this process
// until stop, which waits for it to return; get fetches a page, post
// submits an action's confirmation form (its CSRF token included).
func serveUI(t *testing.T, args ...string) (base string, get func(string) (int, string), post func(string) (int, string), stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var out, errb lockedBuffer
	root := newRoot()
	root.SetArgs(append([]string{"ui", "--addr", "127.0.0.1:0"}, args...))
	root.SetOut(&out)
	root.SetErr(&errb)
	done := make(chan error, 1)
	go func() { done <- root.ExecuteContext(ctx) }()
	at := regexp.MustCompile(`at (http://127\.0\.0\.1:\d+/) \(`)
	testwait.Until(t, func() bool { return at.MatchString(out.String()) }, "idem ui to print its address (stdout %q, stderr %q)", &out, &errb)
	base = at.FindStringSubmatch(out.String())[1]
	get = func(path string) (int, string) {
		t.Helper()
		resp, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	csrf := regexp.MustCompile(`name="csrf" value="([^"]+)"`)
	post = func(action string) (int, string) {
		t.Helper()
		code, page := get("action?" + action)
		m := csrf.FindStringSubmatch(page)
		if code != http.StatusOK || m == nil {
			t.Fatalf("the confirmation of %s: %d\n%s", action, code, page)
		}
		form, _ := url.ParseQuery(action)
		form.Set("csrf", m[1])
		resp, err := http.PostForm(base+"action", form)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	stop = func() {
		cancel()
		if err := testwait.Recv(t, done, "idem ui to stop when its context ends"); err != nil {
			t.Errorf("idem ui: %v", err)
		}
	}
	t.Cleanup(cancel)
	return base, get, post, stop
}

// uiOnStore fills a store with real Runs (settle done, pay unknown) and
// checks idem ui --actions on it: the overview, a record, and resolve
// done changing the store.
func uiOnStore(t *testing.T, s interface {
	idem.Store
	Run(context.Context, idem.Key, func(context.Context) error, ...idem.Option) error
}, args ...string) {
	t.Helper()
	ctx := context.Background()
	if err := s.Run(ctx, idem.Key{Job: "settle", Period: "2026-10-27"}, func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
	pay := idem.Key{Job: "pay", Period: "2026-10-27"}
	if err := s.Run(ctx, pay, func(context.Context) error { return errors.New("reset by peer") }, idem.AtMostOnce()); !errors.Is(err, idem.ErrUnknownOutcome) {
		t.Fatalf("AtMostOnce failure: %v", err)
	}
	_, get, post, stop := serveUI(t, append(args, "--actions")...)
	defer stop()
	if code, body := get(""); code != http.StatusOK || !strings.Contains(body, "settle") || !strings.Contains(body, "reset by peer") {
		t.Errorf("overview: %d\n%s", code, body)
	}
	if code, body := get("record?job=pay&period=2026-10-27"); code != http.StatusOK || !strings.Contains(body, "unknown") {
		t.Errorf("record: %d\n%s", code, body)
	}
	if code, body := post("do=reset&job=pay&period=2026-10-27"); code != http.StatusConflict || !strings.Contains(body, "is unknown, not parked") {
		t.Errorf("reset of an unknown period: %d\n%s", code, body)
	}
	if code, body := post("do=resolve-done&job=pay&period=2026-10-27"); code != http.StatusOK {
		t.Errorf("resolve-done: %d\n%s", code, body)
	}
	if rec, _, err := s.Lookup(ctx, pay); err != nil || rec.Status != idem.StatusDone {
		t.Errorf("after resolve-done through the page: %+v, %v", rec, err)
	}
}

// TestUIPostgres: idem ui --postgres serves a Postgres ledger filled by
// real Runs, and its actions change it.
func TestUIPostgres(t *testing.T) {
	admin, dsn := pgAdmin(t)
	schema := randomName("idemui_")
	t.Cleanup(func() {
		_, _ = admin.Exec(context.Background(), `DROP SCHEMA IF EXISTS `+pgx.Identifier{schema}.Sanitize()+` CASCADE`)
	})
	l, err := pgledger.Open(context.Background(), dsn, pgledger.WithSchema(schema))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	uiOnStore(t, l, "--postgres", dsn, "--postgres-schema", schema)
}

// TestUIRedis: idem ui --redis serves a Redis store filled by real Runs
// (no outbox: shown as absent), and its actions change it.
func TestUIRedis(t *testing.T) {
	addr := redisAddr(t)
	var b [6]byte
	_, _ = rand.Read(b[:])
	prefix := "idemui-" + hex.EncodeToString(b[:])
	s, err := redisstore.Open(context.Background(), "redis://"+addr, redisstore.WithPrefix(prefix))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	uiOnStore(t, s, "--redis", addr, "--redis-prefix", prefix)
}

// The stores the command opens have what the page needs, and the ledgers
// their outbox and items.
var (
	_ ui.Store       = (*pgledger.Ledger)(nil)
	_ ui.Store       = (*redisstore.Store)(nil)
	_ ui.Store       = (*idem.Ledger)(nil)
	_ ui.JobStore    = (*pgledger.Ledger)(nil)
	_ ui.ItemStore   = (*pgledger.Ledger)(nil)
	_ ui.OutboxStore = (*pgledger.Ledger)(nil)
	_ ui.OutboxStore = (*idem.Ledger)(nil)
	_ ui.ItemStore   = (*idem.Ledger)(nil)
)
