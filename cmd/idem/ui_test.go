package main

import (
	"context"
	"io"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/internal/testwait"
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
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out, errb lockedBuffer
	root := newRoot()
	root.SetArgs([]string{"ui", "--ledger", path, "--addr", "127.0.0.1:0", "--schedule", "settle=daily", "--tz", "UTC"})
	root.SetOut(&out)
	root.SetErr(&errb)
	done := make(chan error, 1)
	go func() { done <- root.ExecuteContext(ctx) }()
	at := regexp.MustCompile(`at (http://127\.0\.0\.1:\d+/) \(read-only\)`)
	testwait.Until(t, func() bool { return at.MatchString(out.String()) }, "idem ui to print its address (stdout %q, stderr %q)", &out, &errb)
	base := at.FindStringSubmatch(out.String())[1]
	get := func(path string) (int, string) {
		t.Helper()
		resp, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get(""); code != http.StatusOK || !strings.Contains(body, "settle") || !strings.Contains(body, "late") {
		t.Errorf("overview: %d\n%s", code, body)
	}
	if code, body := get("action?do=resolve-done&job=settle&period=2026-10-27"); code != http.StatusForbidden || !strings.Contains(body, "actions are off") {
		t.Errorf("an action without --actions: %d\n%s", code, body)
	}
	cancel()
	if err := testwait.Recv(t, done, "idem ui to stop when its context ends"); err != nil {
		t.Errorf("idem ui: %v", err)
	}
}
