package idemtest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemstore"
	"github.com/idemgo/idem/internal/testwait"
	"github.com/idemgo/idem/outbox"
)

// RerunKillHarness opens the store of [TestRerunDependentsKills] and runs
// its business statements: the kit's own tables (flows, settlement,
// mails, reports) live in the store's database, written in the
// transactions of RunTx.
type RerunKillHarness[Tx any] struct {
	// Open and Reopen as for the other kill kits (Shift and the rest are
	// not used).
	KillHarness[Tx]
	// Table is the name a statement gives the kit's table name in s's
	// database (qualified by s's schema, say).
	Table func(s idem.Store, name string) string
	// Exec runs query in tx. Its placeholders are ?, in the order of args
	// (the harness rewrites them for its database); its integer columns
	// are BIGINT, its text ones TEXT.
	Exec func(ctx context.Context, tx Tx, query string, args ...any) error
	// QueryRow runs query (as for Exec) in tx and scans its one row into
	// dest (*int64 and *string).
	QueryRow func(ctx context.Context, tx Tx, query string, args []any, dest ...any) error
}

// rerunKillNow is the time of the kit's clock (a FileClock): October's 31
// days and the month are due, November's first day is not.
var rerunKillNow = time.Date(2026, 11, 1, 2, 0, 0, 0, time.UTC)

// rerunKillJobs are the kit's jobs: a daily settle, a daily mail after
// settle's same day, a monthly report after settle's days.
func rerunKillJobs() []idem.JobDeps {
	daily, monthly := idem.Daily(time.UTC), idem.Monthly(time.UTC)
	return []idem.JobDeps{
		{Job: "settle", Schedule: daily},
		{Job: "mail", Schedule: daily, Options: []idem.Option{idem.After("settle", idem.SamePeriod())}},
		{Job: "report", Schedule: monthly, Options: []idem.Option{idem.After("settle", idem.Within(daily))}},
	}
}

// TestRerunDependentsKills re-runs October of a daily RunTx settlement
// whose flow table was corrected, with its dependents
// ([idem.RerunWithDependents]): a daily mail job after settle's same day,
// which queues a mail message in its transaction (outbox.Put), and a
// monthly report after settle's 31 days. The runners — one process per
// job, each catching its job up with CatchUpTx until nothing is left, and
// one outbox relay delivering to a real HTTP receiver that records the
// ids — are started in random subsets and SIGKILLed at random moments,
// 12 times; then the three jobs' runners run to their end and a relay
// delivers what is left. Then, exactly:
//
//   - every settlement row was written twice (the first run and the
//     re-run, counted in the row, in the same RunTx), holds the corrected
//     amount and revision 1;
//   - every mail row was written twice, the second time after its day's
//     new settlement (it read revision 1), and the receiver got, for each
//     day, exactly the message ids of revisions 0 and 1 (the key's
//     RequestID and RevisionRequestID(1), "-0"), the second with the new
//     settlement; a relay killed mid-delivery may deliver an id twice
//     (at least once): the receiver counts ids, not deliveries;
//   - the report was made twice, the second time after all 31 days'
//     re-runs (it read revision 1 on every day, and the corrected total);
//   - every period of the three jobs is done at revision 1;
//   - the request sent again re-ran nothing (every period seen before),
//     and runners with no request left run nothing.
//
// It needs an idemstore.Rerunner, idemstore.Lister and outbox store.
func TestRerunDependentsKills[Tx any](t *testing.T, h RerunKillHarness[Tx]) {
	if IsChild(t) {
		Start(t, "", func(arg string) { // does not return
			f := strings.SplitN(arg, "|", 4)
			if err := rerunKillChild(h, f[0], f[1], f[2], f[3]); err != nil {
				fmt.Println(err)
				os.Exit(3)
			}
		})
	}
	if testing.Short() {
		t.Skip("12 rounds of kills of four processes")
	}
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(uint64(seed), 0))
	ctx := context.Background()
	s, storeArg := h.Open(t)
	dir := t.TempDir()
	clockPath := filepath.Join(dir, "clock")
	now := rerunKillNow
	SetFileClock(t, clockPath, now)
	recv := newRerunReceiver(t)

	// October, run once; the flow table is then corrected.
	rerunKillSetup(t, h, s)
	for _, job := range []string{"settle", "mail", "report"} {
		if err := rerunKillRun(ctx, h, s, job, clockPath); err != nil {
			t.Fatalf("the first run of %s: %v", job, err)
		}
	}
	rerunKillRelay(t, s, recv, 31)
	rerunKillExec(t, h, s, `UPDATE `+h.Table(s, "flows")+` SET amount = amount * 10`)

	var keys []idem.Key
	for d := 1; d <= 31; d++ {
		keys = append(keys, idem.Key{Job: "settle", Period: fmt.Sprintf("2026-10-%02d", d)})
	}
	req := idem.RerunRequest{Keys: keys, RequestID: "flows-fix", Reason: "the flow table was corrected", By: "idemtest"}
	out, err := idem.RerunWithDependents(ctx, s, req, rerunKillJobs()...)
	if err != nil {
		t.Fatal(err)
	}
	if n := rerunStates(out)[idem.RerunQueued]; len(out) != 63 || n != 63 {
		t.Fatalf("the request: %d periods, %d queued (%v); want 63 queued: 31 settle, 31 mail, the report", len(out), n, rerunStates(out))
	}
	if out, err := idem.RerunWithDependents(ctx, s, req, rerunKillJobs()...); err != nil || rerunStates(out)[idem.RerunSeen] != 63 {
		t.Fatalf("the request sent again: %v, %v; want 63 periods seen before", err, rerunStates(out))
	}

	arg := func(role string) string { return role + "|" + clockPath + "|" + recv.srv.URL + "|" + storeArg }
	roles := []string{"settle", "mail", "report", "relay"}
	started := filepath.Join(dir, "started")
	for round := range 12 {
		var children []*Child
		before := linesIn(t, started)
		for _, role := range roles {
			if rng.IntN(3) > 0 {
				children = append(children, Start(t, arg(role), nil))
			}
		}
		// Killed at a random moment once they work (each period's
		// transaction takes a few milliseconds).
		testwait.Until(t, func() bool { return linesIn(t, started) >= before+len(children) }, "round %d: %d runners to start", round, len(children))
		time.Sleep(time.Duration(rng.IntN(300)) * time.Millisecond)
		for _, c := range children {
			c.Kill()
		}
		for _, c := range children {
			if e := c.Wait(); !e.Killed && e.Code != 0 {
				t.Fatalf("round %d: a runner ended with %+v", round, e)
			}
		}
		// A killed runner's claim ends with its lease, on the runners'
		// clock: move it past.
		now = now.Add(time.Minute)
		SetFileClock(t, clockPath, now)
	}
	var progress string
	rerunKillTx(t, s, func(ctx context.Context, tx Tx) error {
		var settled, mailed, reported int64
		err := h.QueryRow(ctx, tx, `SELECT (SELECT COUNT(*) FROM `+h.Table(s, "settlement")+` WHERE revision = 1), (SELECT COUNT(*) FROM `+h.Table(s, "mails")+
			` WHERE revision = 1), (SELECT COUNT(*) FROM `+h.Table(s, "reports")+` WHERE revision = 1)`, nil, &settled, &mailed, &reported)
		progress = fmt.Sprintf("%d settle, %d mail and %d report re-runs done, %d message ids received", settled, mailed, reported, recv.ids())
		return err
	})
	t.Logf("after the kills: %s", progress)
	var last []*Child
	for _, job := range roles[:3] {
		last = append(last, Start(t, arg(job), nil))
	}
	for i, c := range last {
		if e := c.Wait(); e.Code != 0 || e.Killed {
			t.Fatalf("the last run of %s: %+v", roles[i], e)
		}
	}
	rerunKillRelay(t, s, recv, 62)
	for _, job := range roles[:3] { // with no request left, nothing runs
		if err := rerunKillRun(ctx, h, s, job, clockPath); err != nil {
			t.Fatal(err)
		}
	}
	rerunKillCheck(t, h, s, recv)
}

// linesIn counts the lines of the file at path (none if it is not there).
func linesIn(t *testing.T, path string) int {
	b, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	return strings.Count(string(b), "\n")
}

// rerunStates counts the outcomes by state.
func rerunStates(out []idem.RerunOutcome) map[idem.RerunState]int {
	n := map[idem.RerunState]int{}
	for _, o := range out {
		n[o.State]++
	}
	return n
}

// rerunKillTx runs fn in a transaction of s (a RunTx of a key of its
// own) and fails t if it fails.
func rerunKillTx[Tx any](t *testing.T, s idem.TxStore[Tx], fn func(ctx context.Context, tx Tx) error) {
	t.Helper()
	key := idem.Key{Job: "rerun-kill-test", Period: fmt.Sprintf("%d", time.Now().UnixNano())}
	if err := idem.RunTx(context.Background(), s, key, fn); err != nil {
		t.Fatal(err)
	}
}

func rerunKillExec[Tx any](t *testing.T, h RerunKillHarness[Tx], s idem.TxStore[Tx], query string, args ...any) {
	t.Helper()
	rerunKillTx(t, s, func(ctx context.Context, tx Tx) error { return h.Exec(ctx, tx, query, args...) })
}

// rerunKillSetup creates the kit's tables and October's flows (day n:
// amount n).
func rerunKillSetup[Tx any](t *testing.T, h RerunKillHarness[Tx], s idem.TxStore[Tx]) {
	rerunKillTx(t, s, func(ctx context.Context, tx Tx) error {
		for _, ddl := range []string{
			`CREATE TABLE ` + h.Table(s, "flows") + ` (day TEXT PRIMARY KEY, amount BIGINT NOT NULL)`,
			`CREATE TABLE ` + h.Table(s, "settlement") + ` (day TEXT PRIMARY KEY, amount BIGINT NOT NULL, revision BIGINT NOT NULL, writes BIGINT NOT NULL)`,
			`CREATE TABLE ` + h.Table(s, "mails") + ` (day TEXT PRIMARY KEY, revision BIGINT NOT NULL, settle_rev BIGINT NOT NULL, writes BIGINT NOT NULL)`,
			`CREATE TABLE ` + h.Table(s, "reports") + ` (month TEXT PRIMARY KEY, revision BIGINT NOT NULL, total BIGINT NOT NULL, min_rev BIGINT NOT NULL, days BIGINT NOT NULL, writes BIGINT NOT NULL)`,
		} {
			if err := h.Exec(ctx, tx, ddl); err != nil {
				return err
			}
		}
		for d := 1; d <= 31; d++ {
			if err := h.Exec(ctx, tx, `INSERT INTO `+h.Table(s, "flows")+` (day, amount) VALUES (?, ?)`, fmt.Sprintf("2026-10-%02d", d), int64(d)); err != nil {
				return err
			}
		}
		return nil
	})
}

// rerunKillChild is a runner: a job's (rerunKillRun) or the relay's,
// which delivers to the receiver at url until it is killed.
func rerunKillChild[Tx any](h RerunKillHarness[Tx], role, clockPath, url, storeArg string) error {
	ctx := context.Background()
	s, done, err := h.Reopen(ctx, storeArg)
	if err != nil {
		return err
	}
	defer done()
	f, err := os.OpenFile(filepath.Join(filepath.Dir(clockPath), "started"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	if _, err := fmt.Fprintln(f, role); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if role == "relay" {
		return outbox.Relay(ctx, s, outbox.Webhook(url, nil), outbox.WithLease(time.Second), outbox.WithPoll(5*time.Millisecond),
			outbox.WithBackoff(idem.Constant(10*time.Millisecond)))
	}
	return rerunKillRun(ctx, h, s, role, clockPath)
}

// rerunKillRun catches job up on s, on the FileClock at clockPath, until
// none of its periods is left to run: none waits, none is deferred, no
// re-run is due. A failed catch-up (a period a killed runner still
// holds, say) is tried again; after two minutes of it, it gives up.
func rerunKillRun[Tx any](ctx context.Context, h RerunKillHarness[Tx], s idem.TxStore[Tx], job, clockPath string) error {
	var jd idem.JobDeps
	for _, j := range rerunKillJobs() {
		if j.Job == job {
			jd = j
		}
	}
	fn := rerunKillWork(h, s, job)
	opts := append([]idem.Option{idem.Since(time.Date(2026, 10, 1, 0, 0, 0, 0, time.UTC)), idem.CatchUpAll(0),
		idem.WithClock(FileClock{Path: clockPath}), idem.WithLease(200 * time.Millisecond)}, jd.Options...)
	deadline := time.Now().Add(2 * time.Minute)
	var err error
	for time.Now().Before(deadline) {
		var res idem.CatchUpResult
		res, err = idem.CatchUpTx(ctx, s, job, jd.Schedule, fn, opts...)
		left := err != nil || res.Deferred > 0 || slices.ContainsFunc(res.Periods, func(pr idem.PeriodResult) bool { return pr.Outcome == idem.Waiting })
		if !left {
			due, derr := rerunsDue(ctx, s, job, res.Cursor)
			if derr != nil {
				return derr
			}
			if len(due) == 0 {
				return nil
			}
		}
		time.Sleep(5 * time.Millisecond) // its upstream runs in another process
	}
	return fmt.Errorf("%s: periods left after two minutes (last error: %v)", job, err)
}

// rerunsDue is job's re-runs due at or before cursor in s.
func rerunsDue(ctx context.Context, s idem.Store, job, cursor string) ([]string, error) {
	st, err := idemstore.Of(s)
	if err != nil {
		return nil, err
	}
	r, ok := st.(idemstore.Rerunner)
	if !ok {
		return nil, fmt.Errorf("idemtest: the store %T is no idemstore.Rerunner", st)
	}
	return r.RerunsDue(ctx, job, cursor)
}

// rerunKillWork is job's work in its RunTx: settle recomputes the day
// from the flows; mail records the day's settlement revision it read and
// queues a message; report sums the month's settlement. Each counts its
// writes in its row (writes + 1: NOT idempotent, so that a second commit
// of one revision shows) and records the revision it ran for.
func rerunKillWork[Tx any](h RerunKillHarness[Tx], s idem.Store, job string) func(ctx context.Context, tx Tx, p idem.Period) error {
	table := func(name string) string { return h.Table(s, name) }
	return func(ctx context.Context, tx Tx, p idem.Period) error {
		info, _ := idem.InfoFrom(ctx)
		time.Sleep(time.Duration(rand.IntN(30)) * time.Millisecond) // a kill may come in the transaction
		switch job {
		case "settle":
			var amount int64
			if err := h.QueryRow(ctx, tx, `SELECT amount FROM `+table("flows")+` WHERE day = ?`, []any{p.Name}, &amount); err != nil {
				return err
			}
			return h.Exec(ctx, tx, `INSERT INTO `+table("settlement")+` AS t (day, amount, revision, writes) VALUES (?, ?, ?, 1)
				ON CONFLICT (day) DO UPDATE SET amount = excluded.amount, revision = excluded.revision, writes = t.writes + 1`, p.Name, amount, info.Revision)
		case "mail":
			var settleRev int64
			if err := h.QueryRow(ctx, tx, `SELECT revision FROM `+table("settlement")+` WHERE day = ?`, []any{p.Name}, &settleRev); err != nil {
				return err
			}
			if err := h.Exec(ctx, tx, `INSERT INTO `+table("mails")+` AS t (day, revision, settle_rev, writes) VALUES (?, ?, ?, 1)
				ON CONFLICT (day) DO UPDATE SET revision = excluded.revision, settle_rev = excluded.settle_rev, writes = t.writes + 1`, p.Name, info.Revision, settleRev); err != nil {
				return err
			}
			_, err := outbox.Put(ctx, tx, outbox.Message{Topic: "mail", Payload: fmt.Appendf(nil, "%s settle_rev=%d", p.Name, settleRev)})
			return err
		default:
			var total, minRev, days int64
			if err := h.QueryRow(ctx, tx, `SELECT CAST(COALESCE(SUM(amount), 0) AS BIGINT), COALESCE(MIN(revision), -1), COUNT(*) FROM `+table("settlement")+` WHERE day >= ? AND day < ?`,
				[]any{p.Start.Format(time.DateOnly), p.End.Format(time.DateOnly)}, &total, &minRev, &days); err != nil {
				return err
			}
			return h.Exec(ctx, tx, `INSERT INTO `+table("reports")+` AS t (month, revision, total, min_rev, days, writes) VALUES (?, ?, ?, ?, ?, 1)
				ON CONFLICT (month) DO UPDATE SET revision = excluded.revision, total = excluded.total, min_rev = excluded.min_rev, days = excluded.days, writes = t.writes + 1`,
				p.Name, info.Revision, total, minRev, days)
		}
	}
}

// rerunReceiver is the mail's HTTP receiver: it counts the deliveries of
// each message id and keeps its body.
type rerunReceiver struct {
	srv  *httptest.Server
	mu   sync.Mutex
	got  map[string]int
	body map[string]string
}

func newRerunReceiver(t *testing.T) *rerunReceiver {
	r := &rerunReceiver{got: map[string]int{}, body: map[string]string{}}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		b, err := io.ReadAll(req.Body)
		if err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		id := req.Header.Get("Idempotency-Key")
		r.mu.Lock()
		r.got[id]++
		r.body[id] = string(b)
		r.mu.Unlock()
	}))
	t.Cleanup(r.srv.Close)
	return r
}

// ids returns the distinct ids received.
func (r *rerunReceiver) ids() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.got)
}

// rerunKillRelay relays s's outbox to the receiver in this process until
// it has received want distinct ids (a killed relay's claims end with
// their lease).
func rerunKillRelay(t *testing.T, s idem.Store, recv *rerunReceiver, want int) {
	t.Helper()
	d := outbox.Webhook(recv.srv.URL, nil)
	var last error
	testwait.Until(t, func() bool {
		_, last = outbox.RelayOnce(context.Background(), s, d, outbox.WithLease(time.Second))
		return recv.ids() >= want
	}, "the receiver to get %d message ids (%v)", want, lateString(func() string {
		return fmt.Sprintf("it has %d; the relay's last error: %v", recv.ids(), last)
	}))
}

// lateString is a wait's message, made when it is printed.
type lateString func() string

func (f lateString) String() string { return f() }

// rerunKillCheck checks the end of TestRerunDependentsKills.
func rerunKillCheck[Tx any](t *testing.T, h RerunKillHarness[Tx], s idem.TxStore[Tx], recv *rerunReceiver) {
	t.Helper()
	ctx := context.Background()
	table := func(name string) string { return h.Table(s, name) }
	var bad []string
	rerunKillTx(t, s, func(ctx context.Context, tx Tx) error {
		for d := 1; d <= 31; d++ {
			day := fmt.Sprintf("2026-10-%02d", d)
			var amount, rev, writes, mrev, settleRev, mwrites int64
			if err := h.QueryRow(ctx, tx, `SELECT amount, revision, writes FROM `+table("settlement")+` WHERE day = ?`, []any{day}, &amount, &rev, &writes); err != nil {
				return err
			}
			if amount != int64(10*d) || rev != 1 || writes != 2 {
				bad = append(bad, fmt.Sprintf("settlement %s: amount %d, revision %d, written %d times; want %d, 1, 2", day, amount, rev, writes, 10*d))
			}
			if err := h.QueryRow(ctx, tx, `SELECT revision, settle_rev, writes FROM `+table("mails")+` WHERE day = ?`, []any{day}, &mrev, &settleRev, &mwrites); err != nil {
				return err
			}
			if mrev != 1 || settleRev != 1 || mwrites != 2 {
				bad = append(bad, fmt.Sprintf("mail %s: revision %d after settlement revision %d, written %d times; want 1, 1, 2", day, mrev, settleRev, mwrites))
			}
		}
		var rev, total, minRev, days, writes int64
		if err := h.QueryRow(ctx, tx, `SELECT revision, total, min_rev, days, writes FROM `+table("reports")+` WHERE month = ?`, []any{"2026-10"}, &rev, &total, &minRev, &days, &writes); err != nil {
			return err
		}
		if rev != 1 || total != 10*31*32/2 || minRev != 1 || days != 31 || writes != 2 {
			bad = append(bad, fmt.Sprintf("report: revision %d, total %d, the days' lowest revision %d, %d days, made %d times; want 1, %d, 1, 31, 2", rev, total, minRev, days, writes, 10*31*32/2))
		}
		return nil
	})
	// The receiver: exactly the ids of revisions 0 and 1 of each day's mail.
	recv.mu.Lock()
	want := map[string]string{} // id: the body it carries
	for d := 1; d <= 31; d++ {
		day := fmt.Sprintf("2026-10-%02d", d)
		k := idem.Key{Job: "mail", Period: day}
		want[k.RequestID()+"-0"] = day + " settle_rev=0"
		want[k.RevisionRequestID(1)+"-0"] = day + " settle_rev=1"
	}
	again := 0
	for id, n := range recv.got {
		if _, ok := want[id]; !ok {
			bad = append(bad, fmt.Sprintf("the receiver got id %q (%q), not one of the mails' revisions", id, recv.body[id]))
		}
		again += n - 1
	}
	for id, body := range want {
		if recv.got[id] == 0 {
			bad = append(bad, fmt.Sprintf("the receiver never got %s (%s)", id, body))
		} else if recv.body[id] != body {
			bad = append(bad, fmt.Sprintf("the receiver got %s with %q, want %q", id, recv.body[id], body))
		}
	}
	recv.mu.Unlock()
	for _, j := range rerunKillJobs() {
		st, err := idemstore.Of(s)
		if err != nil {
			t.Fatal(err)
		}
		recs, err := st.(idemstore.Lister).List(ctx, idem.Filter{Job: j.Job})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range recs {
			if r.Status != idem.StatusDone || r.Revision != 1 {
				bad = append(bad, fmt.Sprintf("%s: %s at revision %d, want done at 1", r.Key, r.Status, r.Revision))
			}
		}
		if want := map[string]int{"settle": 31, "mail": 31, "report": 1}[j.Job]; len(recs) != want {
			bad = append(bad, fmt.Sprintf("%s: %d records, want %d", j.Job, len(recs), want))
		}
	}
	for _, b := range bad {
		t.Error(b)
	}
	t.Logf("ids delivered again after a relay's kill: %d", again)
	if len(bad) > 0 {
		t.FailNow()
	}
}
