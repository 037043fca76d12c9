//go:build unix

package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/internal/testwait"
	"github.com/idemgo/idem/outbox"
	"github.com/idemgo/idem/pgledger"
	"github.com/jackc/pgx/v5"
)

// hook is a webhook receiver for the tests: it records every request's
// Idempotency-Key and topic, answers 400 to topic "poison", and can hold a
// request until released.
type hook struct {
	mu   sync.Mutex
	got  []string // "topic id", in arrival order
	hold chan struct{}
	held chan string // gets the id of a held request
	srv  *httptest.Server
}

func newHook(t *testing.T) *hook {
	h := &hook{}
	h.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		id, topic := r.Header.Get("Idempotency-Key"), r.Header.Get("Idem-Topic")
		h.mu.Lock()
		h.got = append(h.got, topic+" "+id)
		hold, held := h.hold, h.held
		h.hold = nil
		h.mu.Unlock()
		if hold != nil {
			held <- id
			<-hold
		}
		if topic == "poison" {
			http.Error(w, "no such account", http.StatusBadRequest)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(h.srv.Close)
	return h
}

func (h *hook) requests() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.got...)
}

// putMessages commits two settlements whose transactions queue messages:
// settle 2026-10-27 puts one on "payments" and one on "poison", settle
// 2026-10-28 one on "payments". It returns their ids in that order.
func putMessages(t *testing.T, runTx func(ctx context.Context, key idem.Key, fn func(ctx context.Context, put func(context.Context, outbox.Message) (string, error)) error) error) []string {
	t.Helper()
	var ids []string
	for _, day := range []string{"2026-10-27", "2026-10-28"} {
		err := runTx(context.Background(), idem.Key{Job: "settle", Period: day}, func(ctx context.Context, put func(context.Context, outbox.Message) (string, error)) error {
			id, err := put(ctx, outbox.Message{Topic: "payments", Payload: []byte(`{"day":"` + day + `"}`), Headers: map[string]string{"Content-Type": "application/json"}})
			if err != nil {
				return err
			}
			ids = append(ids, id)
			if day == "2026-10-27" {
				if id, err = put(ctx, outbox.Message{Topic: "poison", Payload: []byte("bad")}); err != nil {
					return err
				}
				ids = append(ids, id)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return ids
}

// sqlitePut commits the messages of putMessages on the test's SQLite ledger.
func (e *env) sqlitePut() []string {
	l, err := idem.OpenLedger(e.ledger)
	if err != nil {
		e.t.Fatal(err)
	}
	defer l.Close()
	return putMessages(e.t, func(ctx context.Context, key idem.Key, fn func(context.Context, func(context.Context, outbox.Message) (string, error)) error) error {
		return l.RunTx(ctx, key, func(ctx context.Context, tx *sql.Tx) error {
			return fn(ctx, func(ctx context.Context, m outbox.Message) (string, error) { return outbox.Put(ctx, tx, m) })
		})
	})
}

// outboxLs runs 'idem outbox ls --json' and returns the messages by id.
func (e *env) outboxLs(args ...string) map[string]messageJSON {
	e.t.Helper()
	out, _ := e.want(exitOK, append([]string{"outbox", "ls", "--json"}, args...)...)
	var list []messageJSON
	if err := json.Unmarshal([]byte(out), &list); err != nil {
		e.t.Fatalf("outbox ls --json: %v\n%s", err, out)
	}
	m := map[string]messageJSON{}
	for _, msg := range list {
		m[msg.ID] = msg
	}
	return m
}

// relay starts 'idem outbox relay' with the test's ledger flags and args.
func (e *env) relay(args ...string) (*exec.Cmd, *bytes.Buffer) {
	e.t.Helper()
	store := []string{"--ledger", e.ledger}
	if e.pg != nil {
		store = e.pg
	}
	cmd := e.command(append(append([]string{"outbox", "relay"}, store...), args...)...)
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = io.Discard, &stderr
	if err := cmd.Start(); err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	return cmd, &stderr
}

// outboxScenario: the relay delivers the messages, parks the poison one
// (400) without holding up the other topic, stops on SIGTERM; ls shows it
// all; retry puts the parked message back, drop deletes it; both refuse an
// id they cannot change (exit 1).
func outboxScenario(t *testing.T, e *env, ids []string) {
	pay1, poison, pay2 := ids[0], ids[1], ids[2]
	for i, id := range []string{pay1, poison, pay2} {
		want := (idem.Key{Job: "settle", Period: "2026-10-27"}).RequestID() + "-" + fmt.Sprint(i)
		if i == 2 {
			want = (idem.Key{Job: "settle", Period: "2026-10-28"}).RequestID() + "-0"
		}
		if id != want {
			t.Fatalf("message %d has id %s, want %s", i, id, want)
		}
	}

	out, _ := e.want(exitOK, "outbox", "ls")
	if lines := strings.Split(strings.TrimSpace(out), "\n"); len(lines) != 4 ||
		!strings.HasPrefix(lines[0], "ID") || !strings.Contains(lines[1], pay1) || !strings.Contains(lines[1], "pending") ||
		!strings.Contains(lines[1], "settle 2026-10-27") {
		t.Fatalf("outbox ls:\n%s", out)
	}
	msgs := e.outboxLs()
	if len(msgs) != 3 || msgs[pay1].Status != "pending" || msgs[pay1].Payload != `{"day":"2026-10-27"}` || msgs[pay1].Topic != "payments" ||
		msgs[pay1].Headers["Content-Type"] != "application/json" {
		t.Fatalf("outbox ls --json: %+v", msgs)
	}

	h := newHook(t)
	relay, stderr := e.relay("--webhook", h.srv.URL, "--poll", "10ms", "-v")
	testwait.Until(t, func() bool {
		m := e.outboxLs()
		return m[pay1].Status == "delivered" && m[pay2].Status == "delivered" && m[poison].Status == "parked"
	}, "the relay to deliver both payments messages and park the poison one")
	if err := relay.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := e.finish(relay, stderr); err != nil {
		t.Fatalf("relay after SIGTERM: %v\n%s", err, stderr.String())
	}
	if !strings.Contains(stderr.String(), "delivered") || !strings.Contains(stderr.String(), "parked") {
		t.Errorf("relay -v: stderr:\n%s", stderr.String())
	}
	got := h.requests()
	if len(got) != 3 {
		t.Fatalf("webhook got %q, want one request per message", got)
	}
	if got[0] != "payments "+pay1 && got[1] != "payments "+pay1 {
		t.Errorf("webhook got %q: payments in order", got)
	}

	out, _ = e.want(exitOK, "outbox", "ls", "--status", "parked")
	if !strings.Contains(out, poison) || !strings.Contains(out, "idem outbox retry "+poison) || strings.Contains(out, pay1) {
		t.Fatalf("outbox ls --status parked:\n%s", out)
	}
	if m := e.outboxLs("--topic", "poison"); len(m) != 1 || m[poison].Attempts != 1 || !strings.Contains(m[poison].LastError, "400") {
		t.Fatalf("outbox ls --topic poison: %+v", m)
	}

	out, _ = e.want(exitOK, "outbox", "retry", poison)
	if !strings.Contains(out, poison) {
		t.Errorf("retry: %q", out)
	}
	if m := e.outboxLs("--status", "pending"); len(m) != 1 || m[poison].Attempts != 0 {
		t.Fatalf("after retry: %+v", m)
	}
	if _, stderr := e.want(exitFailed, "outbox", "retry", poison); !strings.Contains(stderr, "no parked message") {
		t.Errorf("retry of a pending message: %q", stderr)
	}
	e.want(exitOK, "outbox", "drop", poison)
	if m := e.outboxLs(); len(m) != 2 {
		t.Fatalf("after drop: %+v", m)
	}
	if _, stderr := e.want(exitFailed, "outbox", "drop", poison); !strings.Contains(stderr, "no message with this id") {
		t.Errorf("drop of a dropped message: %q", stderr)
	}
}

func TestOutbox(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "")
	outboxScenario(t, e, e.sqlitePut())
}

// TestOutboxRelayKilled: a relay SIGKILLed while the webhook holds its
// request leaves the message pending; after its lease (2 s: far longer
// than the kill takes, so that the first relay cannot time the request
// out and retry it first), the next relay posts it again with the same
// Idempotency-Key, and marks it delivered.
func TestOutboxRelayKilled(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "")
	ids := e.sqlitePut()
	h := newHook(t)
	hold := make(chan struct{})
	h.mu.Lock()
	h.hold, h.held = hold, make(chan string, 1)
	h.mu.Unlock()
	var release sync.Once
	unhold := func() { release.Do(func() { close(hold) }) }
	t.Cleanup(unhold) // before the server's Close: a held request would block it
	relay, stderr := e.relay("--webhook", h.srv.URL, "--poll", "10ms", "--lease", "2s")
	var first string
	e.await(relay, stderr, "the relay's first request", func() { first = <-h.held }) // h.held is not written again
	if err := relay.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = relay.Wait()
	unhold()
	if m := e.outboxLs(); m[first].Status != "pending" || m[first].Attempts != 1 {
		t.Fatalf("after the kill, %s: %+v", first, m[first])
	}
	relay2, stderr2 := e.relay("--webhook", h.srv.URL, "--poll", "10ms")
	testwait.Until(t, func() bool { return e.outboxLs()[first].Status == "delivered" }, "the second relay to deliver %s", first)
	_ = relay2.Process.Signal(syscall.SIGTERM)
	if err := e.finish(relay2, stderr2); err != nil {
		t.Fatalf("relay after SIGTERM: %v\n%s", err, stderr2.String())
	}
	n := 0
	for _, r := range h.requests() {
		if strings.HasSuffix(r, " "+first) {
			n++
		}
	}
	if n != 2 {
		t.Fatalf("%s posted %d times, want 2 (the killed relay's, then the next one's, same key): %q", first, n, h.requests())
	}
	if m := e.outboxLs(); m[first].Attempts != 2 || len(ids) != 3 {
		t.Fatalf("%s: %+v", first, m[first])
	}
}

func TestOutboxUsage(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "")
	e.sqlitePut()
	for _, args := range [][]string{
		{"outbox", "relay"},
		{"outbox", "relay", "--webhook", "ftp://example.com/x"},
		{"outbox", "relay", "--webhook", "http://127.0.0.1:1/x", "--retention", "forever"},
		{"outbox", "relay", "--webhook", "http://127.0.0.1:1/x", "--lease", "1ms"},
		{"outbox", "relay", "--webhook", "http://127.0.0.1:1/x", "--concurrency", "0"},
		{"outbox", "relay", "--webhook", "http://127.0.0.1:1/x", "--rate", "mail"},
		{"outbox", "ls", "--status", "lost"},
		{"outbox", "ls", "--limit", "-1"},
		{"outbox", "retry"},
		{"outbox", "drop", "a", "b"},
		{"outbox"},
	} {
		if _, stderr, code := e.idem(args...); code != exitUsage || stderr == "" {
			t.Errorf("idem %s: exit %d, want %d; stderr %q", strings.Join(args, " "), code, exitUsage, stderr)
		}
	}
	e2 := newEnv(t, "")
	if _, stderr := e2.want(exitUsage, "outbox", "ls"); !strings.Contains(stderr, "no ledger at") {
		t.Errorf("outbox ls without a ledger: %q", stderr)
	}
}

// TestOutboxPostgres is TestOutbox on the Postgres ledger.
func TestOutboxPostgres(t *testing.T) {
	t.Parallel()
	dsn := os.Getenv("IDEM_TEST_PG_DSN")
	if dsn == "" {
		t.Skip("no PostgreSQL: set IDEM_TEST_PG_DSN (eval \"$(scripts/pg.sh start)\" from the repository's root)")
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	schema := "idemcli_" + hex.EncodeToString(b[:])
	l, err := pgledger.Open(context.Background(), dsn, pgledger.WithSchema(schema))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := l.Pool().Exec(context.Background(), `DROP SCHEMA IF EXISTS "`+schema+`" CASCADE`); err != nil {
			t.Errorf("dropping schema %s: %v", schema, err)
		}
		l.Close()
	})
	e := newEnv(t, "")
	e.pg = []string{"--postgres", dsn, "--postgres-schema", schema}
	ids := putMessages(t, func(ctx context.Context, key idem.Key, fn func(context.Context, func(context.Context, outbox.Message) (string, error)) error) error {
		return l.RunTx(ctx, key, func(ctx context.Context, tx pgx.Tx) error {
			return fn(ctx, func(ctx context.Context, m outbox.Message) (string, error) { return outbox.Put(ctx, tx, m) })
		})
	})
	outboxScenario(t, e, ids)
}

// TestOutboxRelaySIGTERMFinishesDelivery: SIGTERM while the webhook holds
// the relay's POST does not abort it. The receiver answers 200 only once
// the relay has taken the signal (it says so on stderr; the old relay
// cancelled the request instead, which the receiver sees); the relay then
// marks the message delivered and exits 0, and a second relay does not
// post it again: the receiver saw its id exactly once.
func TestOutboxRelaySIGTERMFinishesDelivery(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "")
	put := func(day string) string {
		l, err := idem.OpenLedger(e.ledger)
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		var id string
		err = l.RunTx(context.Background(), idem.Key{Job: "settle", Period: day}, func(ctx context.Context, tx *sql.Tx) error {
			id, err = outbox.Put(ctx, tx, outbox.Message{Topic: "payments", Payload: []byte(day)})
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	first := put("2026-10-27")

	var (
		mu        sync.Mutex
		got       []string
		cancelled bool // a request's context ended before the answer
	)
	held, release := make(chan string, 1), make(chan struct{})
	var once sync.Once
	unhold := func() { once.Do(func() { close(release) }) }
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		id := r.Header.Get("Idempotency-Key")
		mu.Lock()
		got = append(got, id)
		mu.Unlock()
		if id == first {
			select {
			case held <- id:
			default:
			}
			select {
			case <-release:
			case <-r.Context().Done():
				mu.Lock()
				cancelled = true
				mu.Unlock()
				<-release
			}
		}
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(unhold) // before the server's Close: a held request would block it

	relay := e.command("outbox", "relay", "--ledger", e.ledger, "--webhook", srv.URL, "--poll", "10ms", "--lease", "1m", "-v")
	var stderr lockedBuffer
	relay.Stdout, relay.Stderr = io.Discard, &stderr
	if err := relay.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if relay.ProcessState == nil {
			_ = relay.Process.Kill()
			_ = relay.Wait()
		}
	})
	var dump bytes.Buffer
	e.await(relay, &dump, "the relay's POST of "+first, func() { <-held })
	if err := relay.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	testwait.Until(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return cancelled || strings.Contains(stderr.String(), "finishing the delivery of "+first)
	}, "the relay to take SIGTERM (it says so on stderr, or cancels the held POST)")
	unhold() // the receiver applies the message and answers 200
	err := testwait.Process(relay, testwait.Limit(t))
	if err != nil {
		t.Fatalf("relay after SIGTERM: %v; want exit 0\n%s", err, stderr.String())
	}
	if cancelled {
		t.Errorf("the relay cancelled the POST under way on SIGTERM")
	}
	if m := e.outboxLs(); m[first].Status != "delivered" || m[first].Attempts != 1 {
		t.Fatalf("after SIGTERM, %s: %+v; want delivered at its first attempt\nrelay's stderr:\n%s", first, m[first], stderr.String())
	}

	// A second relay: a later message of the same topic is delivered only
	// after the first is settled, so once it is, the second relay has
	// posted the first again if it ever will.
	second := put("2026-10-28")
	relay2, stderr2 := e.relay("--webhook", srv.URL, "--poll", "10ms")
	testwait.Until(t, func() bool { return e.outboxLs()[second].Status == "delivered" }, "the second relay to deliver %s", second)
	_ = relay2.Process.Signal(syscall.SIGTERM)
	if err := e.finish(relay2, stderr2); err != nil {
		t.Fatalf("second relay after SIGTERM: %v\n%s", err, stderr2.String())
	}
	mu.Lock()
	defer mu.Unlock()
	if n := strings.Count(strings.Join(got, " "), first); n != 1 {
		t.Fatalf("the receiver got %s %d times, want once: %q", first, n, got)
	}
}

// TestOutboxRelaySIGTERMGivesBackBatch: SIGTERM while the webhook holds
// the POST of topic slow's head, three deploys over. The relay finishes
// that delivery and exits 0; the messages it claimed with it and never
// posted (slow's next ones, and topics a and b, all in its batch) are
// given back: pending, 0 attempts, and never posted. The old relay handed
// them to a deliverer that refused them, counting an attempt on each
// every stop, until one parked at its first real failure. A last relay
// delivers them all, each at its first attempt.
func TestOutboxRelaySIGTERMGivesBackBatch(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "")
	l, err := idem.OpenLedger(e.ledger)
	if err != nil {
		t.Fatal(err)
	}
	var slow, others []string
	err = l.RunTx(context.Background(), idem.Key{Job: "settle", Period: "2026-10-27"}, func(ctx context.Context, tx *sql.Tx) error {
		for i, topic := range []string{"slow", "slow", "slow", "a", "b"} {
			id, err := outbox.Put(ctx, tx, outbox.Message{Topic: topic, Payload: []byte(fmt.Sprint(i))})
			if err != nil {
				return err
			}
			if topic == "slow" {
				slow = append(slow, id)
			} else {
				others = append(others, id)
			}
		}
		return nil
	})
	l.Close()
	if err != nil {
		t.Fatal(err)
	}

	var (
		mu       sync.Mutex
		holdID   string                  // the id whose POST the receiver holds
		attempts = map[string][]string{} // Idem-Attempt of every POST, by id
	)
	held, release := make(chan string, 1), make(chan struct{}, 1)
	stop := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		id := r.Header.Get("Idempotency-Key")
		mu.Lock()
		attempts[id] = append(attempts[id], r.Header.Get("Idem-Attempt"))
		hold := id == holdID
		mu.Unlock()
		if hold {
			select {
			case held <- id:
			default:
			}
			select {
			case <-release:
			case <-stop:
			}
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(stop) }) // before the server's Close: a held request would block it

	for i, id := range slow {
		mu.Lock()
		holdID = id
		mu.Unlock()
		relay := e.command("outbox", "relay", "--ledger", e.ledger, "--webhook", srv.URL, "--poll", "10ms", "--lease", "1m")
		var stderr lockedBuffer
		relay.Stdout, relay.Stderr = io.Discard, &stderr
		if err := relay.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if relay.ProcessState == nil {
				_ = relay.Process.Kill()
				_ = relay.Wait()
			}
		})
		var dump bytes.Buffer
		e.await(relay, &dump, "the relay's POST of "+id, func() { <-held })
		if err := relay.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		testwait.Until(t, func() bool { return strings.Contains(stderr.String(), "finishing the delivery of "+id) },
			"deploy %d: the relay to take SIGTERM (it says so on stderr)", i+1)
		release <- struct{}{}
		if err := testwait.Process(relay, testwait.Limit(t)); err != nil {
			t.Fatalf("deploy %d: relay after SIGTERM: %v; want exit 0\n%s", i+1, err, stderr.String())
		}
		m := e.outboxLs()
		if m[id].Status != "delivered" {
			t.Fatalf("deploy %d: %s, held during SIGTERM: %+v; want delivered", i+1, id, m[id])
		}
		for _, o := range append(slices.Clone(slow[i+1:]), others...) {
			mu.Lock()
			got := attempts[o]
			mu.Unlock()
			if m[o].Status != "pending" || m[o].Attempts != 0 || len(got) != 0 {
				t.Fatalf("deploy %d: %s, claimed with %s and never posted: %+v, posted at attempts %q; want pending with 0 attempts\nrelay's stderr:\n%s",
					i+1, o, id, m[o], got, stderr.String())
			}
		}
	}

	mu.Lock()
	holdID = ""
	mu.Unlock()
	relay, stderr := e.relay("--webhook", srv.URL, "--poll", "10ms")
	testwait.Until(t, func() bool {
		m := e.outboxLs()
		for _, id := range others {
			if m[id].Status != "delivered" {
				return false
			}
		}
		return true
	}, "the last relay to deliver %q", others)
	_ = relay.Process.Signal(syscall.SIGTERM)
	if err := e.finish(relay, stderr); err != nil {
		t.Fatalf("last relay after SIGTERM: %v\n%s", err, stderr.String())
	}
	mu.Lock()
	defer mu.Unlock()
	for _, id := range others {
		if got := attempts[id]; len(got) == 0 || slices.ContainsFunc(got, func(a string) bool { return a != "1" }) {
			t.Fatalf("%s, never posted before the last relay: posted at attempts %q, want 1", id, got)
		}
	}
}
