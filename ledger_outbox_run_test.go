package idem_test

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemstore"
	"github.com/idemgo/idem/outbox"
	"modernc.org/sqlite"
)

// TestLedgerClaimOutboxRuns: with OutboxClaimRequest.Run, a claim takes
// with a topic's first pending message the ones right after it, up to Run
// of the topic and N in all, and stops at the first that is not due; a
// message after a run that is held is not a topic's head, so no other
// claim takes it; ReleaseOutbox gives a claim back as it was, and a stale
// token's release changes nothing.
func TestLedgerClaimOutboxRuns(t *testing.T) {
	ctx := context.Background()
	l := openLedger(t, t.TempDir())
	s := store(t, l)
	put := func(topic string, n int) []string {
		var ids []string
		for i := range n {
			key := idem.Key{Job: "runs", Period: fmt.Sprintf("%s-%d", topic, i)}
			if err := l.RunTx(ctx, key, func(ctx context.Context, tx *sql.Tx) error {
				id, err := outbox.Put(ctx, tx, outbox.Message{Topic: topic})
				ids = append(ids, id)
				return err
			}); err != nil {
				t.Fatal(err)
			}
		}
		return ids
	}
	a := put("a", 6)
	b := put("b", 2)
	now := time.Now()
	claim := func(owner string, n, run int, at time.Time) []idemstore.OutboxRecord {
		t.Helper()
		recs, err := s.ClaimOutbox(ctx, idemstore.OutboxClaimRequest{N: n, Run: run, Owner: owner, Now: at, Lease: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		return recs
	}
	idsOf := func(recs []idemstore.OutboxRecord) []string {
		var out []string
		for _, r := range recs {
			out = append(out, r.ID)
		}
		return out
	}
	// N 5, Run 4: a's head and three after it, b's head (every head has
	// its place), in Seq order.
	got := claim("r1", 5, 4, now)
	if want := []string{a[0], a[1], a[2], a[3], b[0]}; fmt.Sprint(idsOf(got)) != fmt.Sprint(want) {
		t.Fatalf("claim with Run 4 took %v, want %v", idsOf(got), want)
	}
	for _, r := range got {
		if r.Attempts != 1 || r.Owner != "r1" {
			t.Fatalf("claimed %+v", r)
		}
	}
	// a[4] comes after a's held run and b[1] after b's held head: no
	// claim takes them.
	if again := claim("r2", 10, 10, now); len(again) != 0 {
		t.Fatalf("a second claim took %v while the runs before them were held", idsOf(again))
	}
	// a[0] delivered, a[1] fails and is due again in an hour, a[2] and
	// a[3] given back, plus a release with a stale token (no effect).
	if err := s.DeliveredOutbox(ctx, a[0], got[0].Token, now); err != nil {
		t.Fatal(err)
	}
	if err := s.FailOutbox(ctx, a[1], got[1].Token, idemstore.OutboxFailure{Now: now, NotBefore: now.Add(time.Hour), Error: "503"}); err != nil {
		t.Fatal(err)
	}
	if err := s.ReleaseOutbox(ctx, []idemstore.OutboxClaimed{{ID: a[2], Token: got[2].Token}, {ID: a[3], Token: got[3].Token},
		{ID: b[0], Token: got[4].Token - 1}}); err != nil {
		t.Fatal(err)
	}
	recs, err := s.ListOutbox(ctx, idemstore.OutboxFilter{})
	if err != nil {
		t.Fatal(err)
	}
	byID := map[string]idemstore.OutboxRecord{}
	for _, r := range recs {
		byID[r.ID] = r
	}
	for _, id := range a[2:4] {
		if r := byID[id]; r.Status != idemstore.OutboxPending || r.Attempts != 0 || !r.LeaseUntil.IsZero() {
			t.Fatalf("released %+v; want pending, 0 attempts, no lease", r)
		}
	}
	if r := byID[b[0]]; r.Attempts != 1 || r.LeaseUntil.IsZero() {
		t.Fatalf("a release with a stale token changed %+v", r)
	}
	// a's head a[1] is not due: nothing of a. Once it is due, a's run
	// is a[1] to a[5].
	if again := claim("r3", 10, 10, now); len(again) != 0 {
		t.Fatalf("claimed %v while a's head backs off and b's is held", idsOf(again))
	}
	later := now.Add(2 * time.Hour) // b[0]'s lease ran out too
	if got := claim("r4", 10, 10, later); fmt.Sprint(idsOf(got)) != fmt.Sprint(append(a[1:], b...)) {
		t.Fatalf("claim after the backoff took %v, want %v", idsOf(got), append(a[1:], b...))
	}
}

// TestLedgerClaimOutboxRunStopsAtNotDue: a run ends at the first message
// after the head that is not due (one that failed and backs off while an
// operator's retry put an earlier one back in front of it).
func TestLedgerClaimOutboxRunStopsAtNotDue(t *testing.T) {
	ctx := context.Background()
	l := openLedger(t, t.TempDir())
	s := store(t, l)
	var ids []string
	for i := range 4 {
		if err := l.RunTx(ctx, idem.Key{Job: "stop", Period: fmt.Sprint(i)}, func(ctx context.Context, tx *sql.Tx) error {
			id, err := outbox.Put(ctx, tx, outbox.Message{Topic: "t"})
			ids = append(ids, id)
			return err
		}); err != nil {
			t.Fatal(err)
		}
	}
	now := time.Now()
	req := idemstore.OutboxClaimRequest{N: 1, Owner: "r", Now: now, Lease: time.Minute}
	// ids[0] is parked; ids[1] fails and backs off for an hour; then the
	// operator retries ids[0].
	c, err := s.ClaimOutbox(ctx, req)
	if err != nil || len(c) != 1 {
		t.Fatal(c, err)
	}
	if err := s.FailOutbox(ctx, ids[0], c[0].Token, idemstore.OutboxFailure{Now: now, Park: true, Error: "bad"}); err != nil {
		t.Fatal(err)
	}
	if c, err = s.ClaimOutbox(ctx, req); err != nil || len(c) != 1 || c[0].ID != ids[1] {
		t.Fatal(c, err)
	}
	if err := s.FailOutbox(ctx, ids[1], c[0].Token, idemstore.OutboxFailure{Now: now, NotBefore: now.Add(time.Hour), Error: "503"}); err != nil {
		t.Fatal(err)
	}
	if err := s.RetryOutbox(ctx, ids[0], now); err != nil {
		t.Fatal(err)
	}
	req.N, req.Run = 10, 10
	if c, err = s.ClaimOutbox(ctx, req); err != nil || len(c) != 1 || c[0].ID != ids[0] {
		t.Fatalf("claim took %v, %v; want %s alone: the run stops at %s, which backs off", c, err, ids[0], ids[1])
	}
}

// pagesRead runs q with args on c and returns how many pages SQLite's
// pager fetched for it (sqlite3_db_status: cache hits and misses), a
// count of the statement's work, not a time. A statement that writes runs
// in a transaction that is rolled back.
func pagesRead(t *testing.T, c *sql.Conn, q string, args ...any) int {
	t.Helper()
	ctx := context.Background()
	status := func() (n int) {
		err := c.Raw(func(dc any) error {
			for _, op := range []sqlite.DBStatusOp{sqlite.DBStatusCacheHit, sqlite.DBStatusCacheMiss} {
				cur, _, err := dc.(sqlite.DBStatus).Status(op, false)
				if err != nil {
					return err
				}
				n += cur
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	if _, err := c.ExecContext(ctx, `BEGIN`); err != nil {
		t.Fatal(err)
	}
	defer c.ExecContext(ctx, `ROLLBACK`)
	before := status()
	rows, err := c.QueryContext(ctx, q, args...)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
	}
	if err := rows.Close(); err != nil {
		t.Fatal(err)
	}
	return status() - before
}

// TestLedgerClaimOutboxBacklog: an outbox claim reads the topics' heads
// and what follows them, not the backlog. With 20,000 pending messages of
// 4 topics (interleaved; or all but three of one topic, the other three's
// last; or interleaved with each topic's head leased), each statement of
// the claim (idem.LedgerOutboxClaimSQL) reads at most 100 pages, before
// and after ANALYZE; and a claim of 32 with runs takes 32 messages, each
// topic's in order (none while every head is leased).
func TestLedgerClaimOutboxBacklog(t *testing.T) {
	t.Parallel()
	const backlog, topics, maxPages = 20_000, 4, 100
	for _, lay := range []struct {
		name  string
		topic string // of message i (?1), of ?2 topics
		lease bool   // each topic's head leased
	}{
		{"interleaved", `'t' || (i % ?2)`, false},
		{"one topic first", `CASE WHEN i < ?1 - 3 THEN 't0' ELSE 't' || (?1 - i) END`, false},
		{"heads leased", `'t' || (i % ?2)`, true},
	} {
		t.Run(lay.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			dir := t.TempDir()
			l := openLedger(t, dir)
			s := store(t, l)
			if _, err := l.DB().ExecContext(ctx, `WITH RECURSIVE c(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM c WHERE i + 1 < ?1)
				INSERT INTO idem_outbox(id, topic, payload, job, period, created)
				SELECT 'backlog/p' || printf('%06d', i) || '-0', `+lay.topic+`, x'7b7d', 'backlog', printf('p%06d', i), 1 FROM c`,
				backlog, topics); err != nil {
				t.Fatal(err)
			}
			if lay.lease {
				if _, err := l.DB().ExecContext(ctx, `UPDATE idem_outbox SET lease_until = ? WHERE seq IN (SELECT min(seq) FROM idem_outbox GROUP BY topic)`,
					time.Now().Add(time.Hour).UnixMicro()); err != nil {
					t.Fatal(err)
				}
			}
			db, err := sql.Open("sqlite", filepath.Join(dir, "ledger.db"))
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			c, err := db.Conn(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			now := time.Now().UnixMicro()
			args := map[string][]any{
				"due":   {now, 1},
				"heads": {now, 32},
				"claim": {now, 32, "r", now + 1},
				"next":  {"t1", int64(0), 31},
			}
			for _, stats := range []string{"unknown", "known"} {
				if stats == "known" {
					if _, err := c.ExecContext(ctx, `ANALYZE`); err != nil {
						t.Fatal(err)
					}
				}
				for name, q := range idem.LedgerOutboxClaimSQL {
					if n := pagesRead(t, c, q, args[name]...); n > maxPages {
						t.Errorf("statistics %s: %s read %d pages of a ledger with %d pending messages, want at most %d", stats, name, n, backlog, maxPages)
					} else {
						t.Logf("statistics %s: %s read %d pages", stats, name, n)
					}
				}
			}
			got, err := s.ClaimOutbox(ctx, idemstore.OutboxClaimRequest{N: 32, Run: 32, Owner: "r", Now: time.Now(), Lease: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			if want := map[bool]int{false: 32, true: 0}[lay.lease]; len(got) != want {
				t.Fatalf("a claim of 32 with runs on %d pending messages took %d, want %d", backlog, len(got), want)
			}
			recs, err := s.ListOutbox(ctx, idemstore.OutboxFilter{Status: idemstore.OutboxPending})
			if err != nil {
				t.Fatal(err)
			}
			first := map[string][]string{} // each topic's pending messages, in order
			for _, r := range recs {
				first[r.Topic] = append(first[r.Topic], r.ID)
			}
			next := map[string]int{}
			for i, r := range got {
				if want := first[r.Topic][next[r.Topic]]; r.ID != want || i > 0 && r.Seq <= got[i-1].Seq {
					t.Fatalf("message %d of the claim is %s (seq %d), want %s, in Seq order", i, r.ID, r.Seq, want)
				}
				next[r.Topic]++
			}
		})
	}
}
