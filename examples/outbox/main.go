// Command outbox settles business days and notifies a payment system of
// each settlement through a transactional outbox, and shows what happens
// when the relay that delivers the notifications is killed in the middle of
// a delivery.
//
//	go run ./examples/outbox
//
// The settlement upserts the day's amount and queues its notification
// (outbox.Put) in one transaction with idem's done mark (Ledger.RunTx): the
// notification exists if and only if the settlement committed. A relay
// (idem.Relay with the Webhook deliverer) posts it to the payment system,
// here an HTTP server in this program that dedupes by the Idempotency-Key
// header. The relay runs in a child process that is killed (SIGKILL) after
// the payment system has applied the notification and before the relay
// could mark it delivered; the next relay delivers it again, with the same
// key, and the payment system ignores the duplicate. Each day is notified
// once.
//
// Delivery is at least once, not exactly once: the receiver's dedupe by
// the key is what makes the duplicate harmless.
package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemstore"
	"github.com/idemgo/idem/outbox"
)

const (
	childEnv = "OUTBOX_CHILD_DIR" // the child relay's ledger directory
	urlEnv   = "OUTBOX_RECEIVER"  // the payment system's address, for the child
	nowEnv   = "OUTBOX_NOW"       // the child's clock, set by the demo
)

// lease is how long a relay holds a message it is delivering.
const lease = time.Minute

// clock is the demo's clock: it reads a time the demo sets, so each step
// happens at a stated moment (and the demo never waits for a lease to
// expire in real time).
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) set(t time.Time) {
	c.mu.Lock()
	c.now = t
	c.mu.Unlock()
}

func (c *clock) After(d time.Duration) <-chan time.Time { return time.After(d) }

func main() {
	dirFlag := flag.String("dir", "", "keep the database in this directory (default: a temporary one, removed at exit)")
	flag.Parse()
	log.SetFlags(0)
	if dir := os.Getenv(childEnv); dir != "" {
		child(dir)
		return
	}
	dir := *dirFlag
	if dir == "" {
		tmp, err := os.MkdirTemp("", "idem-outbox-")
		if err != nil {
			log.Fatal(err)
		}
		defer os.RemoveAll(tmp)
		dir = tmp
	}
	if _, err := demo(context.Background(), dir); err != nil {
		log.Fatal(err)
	}
}

func open(dir string, clk idem.Clock) (*idem.Ledger, error) {
	l, err := idem.OpenLedger(filepath.Join(dir, "settle.db"), idem.WithClock(clk))
	if err != nil {
		return nil, err
	}
	_, err = l.DB().Exec(`
		CREATE TABLE IF NOT EXISTS flow(id INTEGER PRIMARY KEY, biz_date TEXT NOT NULL, amount_cent INTEGER NOT NULL);
		CREATE TABLE IF NOT EXISTS daily_settle(biz_date TEXT PRIMARY KEY, amount_cent INTEGER NOT NULL);
		INSERT OR IGNORE INTO flow VALUES (1,'2026-10-27',1000), (2,'2026-10-27',500), (3,'2026-10-28',700), (4,'2026-10-28',-200);`)
	if err != nil {
		l.Close()
		return nil, err
	}
	return l, nil
}

// notice is the notification's payload.
type notice struct {
	BizDate    string `json:"biz_date"`
	AmountCent int64  `json:"amount_cent"`
}

// settle recomputes the day's amount, upserts it and queues the
// notification, all in tx: the notification commits with the settlement
// and the done mark, or not at all.
func settle(ctx context.Context, tx *sql.Tx, day string) error {
	var amount int64
	if err := tx.QueryRowContext(ctx, `SELECT coalesce(sum(amount_cent), 0) FROM flow WHERE biz_date = ?`, day).Scan(&amount); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO daily_settle(biz_date, amount_cent) VALUES(?, ?)
		ON CONFLICT(biz_date) DO UPDATE SET amount_cent = excluded.amount_cent`, day, amount); err != nil {
		return err
	}
	body, err := json.Marshal(notice{BizDate: day, AmountCent: amount})
	if err != nil {
		return err
	}
	_, err = outbox.Put(ctx, tx, outbox.Message{Topic: "payments", Payload: body, Headers: map[string]string{"Content-Type": "application/json"}})
	return err
}

func trigger(ctx context.Context, l *idem.Ledger, day string) (idem.Result, error) {
	var res idem.Result
	err := l.RunTx(ctx, idem.Key{Job: "daily_settle", Period: day}, func(ctx context.Context, tx *sql.Tx) error {
		return settle(ctx, tx, day)
	}, idem.ReportTo(&res))
	return res, err
}

// payments is the payment system: it applies each notification once,
// deduping by its Idempotency-Key, and answers 200 to a duplicate.
type payments struct {
	mu       sync.Mutex
	applied  map[string]notice // by Idempotency-Key
	requests int
	// hold, when set, is called after a notification is applied and
	// before the answer: the demo kills the relay there.
	hold func()
}

func (p *payments) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	key := r.Header.Get("Idempotency-Key")
	var n notice
	body, err := io.ReadAll(r.Body)
	if err == nil {
		err = json.Unmarshal(body, &n)
	}
	if key == "" || err != nil {
		http.Error(w, "want a JSON notice with an Idempotency-Key", http.StatusBadRequest)
		return
	}
	p.mu.Lock()
	p.requests++
	_, dup := p.applied[key]
	if !dup {
		p.applied[key] = n
	}
	hold := p.hold
	p.hold = nil
	p.mu.Unlock()
	if dup {
		fmt.Printf("        (payments: %s again, key %s: already applied, ignored)\n", n.BizDate, key)
	} else {
		fmt.Printf("        (payments: applied %s, %d cents, key %s)\n", n.BizDate, n.AmountCent, key)
	}
	if hold != nil {
		hold()
	}
	w.WriteHeader(http.StatusOK)
}

// perDay counts the applied notifications of each day.
func (p *payments) perDay() map[string]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	m := map[string]int{}
	for _, n := range p.applied {
		m[n.BizDate]++
	}
	return m
}

// Report is what the demo saw: the notifications the payment system
// applied per day, and how many requests it got.
type Report struct {
	Applied  map[string]int
	Requests int
}

// demo runs the demonstration in dir. When ctx ends while the child runs,
// the child is killed.
func demo(ctx context.Context, dir string) (Report, error) {
	loc := time.FixedZone("CST", 8*3600) // the business zone, Asia/Shanghai
	run1 := time.Date(2026, 10, 28, 2, 0, 0, 0, loc)
	clk := &clock{now: run1}
	l, err := open(dir, clk)
	if err != nil {
		return Report{}, err
	}
	defer l.Close()
	pay := &payments{applied: map[string]notice{}}
	srv := httptest.NewServer(pay)
	defer srv.Close()
	fmt.Printf("ledger, business tables and outbox: %s\npayment system: %s\n\n", l.Path(), srv.URL)

	day := idem.LastPeriod(idem.Daily(loc), run1).Name
	fmt.Printf("step 1: at %s the run settles %s and queues its notification in the same transaction\n", run1.Format("2006-01-02 15:04"), day)
	res, err := trigger(ctx, l, day)
	if err != nil {
		return Report{}, err
	}
	fmt.Printf("        -> %s (attempt %d); %s\n", res.Outcome, res.Attempt, outboxState(ctx, l))

	fmt.Printf("step 2: triggered again for %s\n", day)
	if res, err = trigger(ctx, l, day); err != nil {
		return Report{}, err
	}
	fmt.Printf("        -> %s: no second notification queued; %s\n", res.Outcome, outboxState(ctx, l))

	fmt.Printf("step 3: a relay in another process posts the notification, and is killed (SIGKILL) once the payment system has applied it, before it marks it delivered\n")
	killed, err := relayKilled(ctx, dir, srv.URL, clk.Now(), pay)
	if err != nil {
		return Report{}, err
	}
	fmt.Printf("        -> child %s; %s\n", killed, outboxState(ctx, l))

	clk.set(clk.Now().Add(lease + time.Second))
	fmt.Printf("step 4: at %s, the dead relay's lease has run out; a relay here delivers the notification again, with the same key\n", clk.Now().Format("15:04:05"))
	rr, err := outbox.RelayOnce(ctx, l, outbox.Webhook(srv.URL, srv.Client()), outbox.WithClock(clk), outbox.WithLease(lease))
	if err != nil {
		return Report{}, err
	}
	fmt.Printf("        -> delivered %d; %s\n", rr.Delivered, outboxState(ctx, l))

	run2 := run1.AddDate(0, 0, 1)
	day2 := idem.LastPeriod(idem.Daily(loc), run2).Name
	clk.set(run2)
	fmt.Printf("step 5: at %s the run settles %s; the relay delivers its notification\n", run2.Format("2006-01-02 15:04"), day2)
	if res, err = trigger(ctx, l, day2); err != nil {
		return Report{}, err
	}
	if rr, err = outbox.RelayOnce(ctx, l, outbox.Webhook(srv.URL, srv.Client()), outbox.WithClock(clk), outbox.WithLease(lease)); err != nil {
		return Report{}, err
	}
	fmt.Printf("        -> %s (attempt %d), delivered %d; %s\n", res.Outcome, res.Attempt, rr.Delivered, outboxState(ctx, l))

	rep := Report{Applied: pay.perDay()}
	pay.mu.Lock()
	rep.Requests = pay.requests
	pay.mu.Unlock()
	var days []string
	for d, n := range rep.Applied {
		days = append(days, fmt.Sprintf("%s=%d", d, n))
	}
	sort.Strings(days)
	fmt.Printf("\nnotifications applied by the payment system: %s (%d requests: the duplicate was ignored by its key)\n", strings.Join(days, " "), rep.Requests)
	if len(rep.Applied) != 2 || rep.Applied[day] != 1 || rep.Applied[day2] != 1 {
		return rep, fmt.Errorf("want one notification per day, got %v", rep.Applied)
	}
	fmt.Println("each business day settled once and notified once.")
	return rep, nil
}

// relayKilled starts the child relay, waits until the payment system has
// applied the notification the child posted, kills the child there, and
// returns how it ended.
func relayKilled(ctx context.Context, dir, url string, now time.Time, pay *payments) (string, error) {
	applied := make(chan struct{})
	release := make(chan struct{})
	pay.mu.Lock()
	pay.hold = func() {
		close(applied)
		<-release // answer only once the relay is dead
	}
	pay.mu.Unlock()
	defer close(release)
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), childEnv+"="+dir, urlEnv+"="+url, nowEnv+"="+now.Format(time.RFC3339))
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	if err := cmd.Start(); err != nil {
		return "", err
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	timer := time.NewTimer(time.Minute)
	defer timer.Stop()
	select {
	case <-applied:
	case err := <-exited:
		return "", fmt.Errorf("the child relay ended before it delivered: %v", err)
	case <-timer.C:
		_ = cmd.Process.Kill()
		<-exited
		return "", errors.New("the child relay did not deliver within a minute (killed)")
	case <-ctx.Done():
		_ = cmd.Process.Kill()
		<-exited
		return "", context.Cause(ctx)
	}
	if err := cmd.Process.Kill(); err != nil { // SIGKILL; TerminateProcess on Windows
		return "", err
	}
	err := <-exited
	if err == nil {
		return "", errors.New("the child relay was not killed: it exited 0")
	}
	return cmd.ProcessState.String(), nil
}

// child runs a relay until it is killed: it delivers the pending
// notification and never gets to mark it delivered.
func child(dir string) {
	now, err := time.Parse(time.RFC3339, os.Getenv(nowEnv))
	if err != nil {
		log.Fatal(err)
	}
	clk := &clock{now: now}
	l, err := open(dir, clk)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("        (child relay: started, pid %d)\n", os.Getpid())
	err = outbox.Relay(context.Background(), l, outbox.Webhook(os.Getenv(urlEnv), nil),
		outbox.WithClock(clk), outbox.WithLease(lease), outbox.WithPoll(10*time.Millisecond))
	log.Fatalf("child relay: returned: %v", err)
}

// outboxState describes the outbox's messages: id, status and attempts.
func outboxState(ctx context.Context, l *idem.Ledger) string {
	msgs, err := l.ListOutbox(ctx, idemstore.OutboxFilter{})
	if err != nil {
		return err.Error()
	}
	if len(msgs) == 0 {
		return "outbox: empty"
	}
	var parts []string
	for _, m := range msgs {
		parts = append(parts, fmt.Sprintf("%s %s (attempts %d)", m.Key.Period, m.Status, m.Attempts))
	}
	return "outbox: " + strings.Join(parts, ", ")
}
