package idemstore_test

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/idemgo/idem/idemstore"
	"github.com/idemgo/idem/internal/holder"
)

var (
	t0  = time.Date(2026, 10, 27, 3, 4, 5, 123456789, time.UTC)
	key = idemstore.Key{Job: "j", Period: "2026-10-27"}
)

// TestDecide checks every row of Decide's table. The holders are owners
// HolderGone cannot prove dead (another host), so a live lease holds.
func TestDecide(t *testing.T) {
	const alive = "elsewhere:1:abcd"
	for _, c := range []struct {
		name        string
		rec         idemstore.Record
		found       bool
		takeUnknown bool
		state       idemstore.ClaimState
		take, doubt bool
	}{
		{"no record", idemstore.Record{}, false, false, idemstore.ClaimAcquired, true, false},
		{"done", idemstore.Record{Status: idemstore.StatusDone}, true, false, idemstore.ClaimDone, false, false},
		{"skipped", idemstore.Record{Status: idemstore.StatusSkipped}, true, false, idemstore.ClaimSkipped, false, false},
		{"running, lease holds", idemstore.Record{Status: idemstore.StatusRunning, Owner: alive, LeaseUntil: t0.Add(time.Nanosecond)}, true, false, idemstore.ClaimBusy, false, false},
		{"running, lease ends now", idemstore.Record{Status: idemstore.StatusRunning, Owner: alive, LeaseUntil: t0}, true, false, idemstore.ClaimAcquired, true, true},
		{"failed, backing off", idemstore.Record{Status: idemstore.StatusFailed, NotBefore: t0.Add(time.Nanosecond)}, true, false, idemstore.ClaimBackingOff, false, false},
		{"failed, due", idemstore.Record{Status: idemstore.StatusFailed, NotBefore: t0}, true, false, idemstore.ClaimAcquired, true, false},
		{"unknown", idemstore.Record{Status: idemstore.StatusUnknown}, true, false, idemstore.ClaimUnknown, false, false},
		{"unknown, taken to check", idemstore.Record{Status: idemstore.StatusUnknown}, true, true, idemstore.ClaimAcquired, true, true},
		{"parked", idemstore.Record{Status: idemstore.StatusParked}, true, true, idemstore.ClaimParked, false, false},
		{"a status it does not know", idemstore.Record{Status: "paused"}, true, true, idemstore.ClaimParked, false, false},
	} {
		state, take, doubt := idemstore.Decide(c.rec, c.found, idemstore.ClaimRequest{Key: key, Now: t0, TakeUnknown: c.takeUnknown})
		if state != c.state || take != c.take || doubt != c.doubt {
			t.Errorf("%s: %v take=%v doubt=%v, want %v take=%v doubt=%v", c.name, state, take, doubt, c.state, c.take, c.doubt)
		}
	}
}

// TestDecideHolderGone: a lease whose holder's process is gone does not
// hold, for a claim or a resolution.
func TestDecideHolderGone(t *testing.T) {
	dead := holder.EndedForTest()
	if dead == "" {
		t.Skip("HolderGone cannot prove a process dead here (an owner without scope)")
	}
	rec := idemstore.Record{Key: key, Status: idemstore.StatusRunning, Attempt: 3, Owner: dead, LeaseUntil: t0.Add(time.Hour)}
	state, take, doubt := idemstore.Decide(rec, true, idemstore.ClaimRequest{Key: key, Now: t0})
	if state != idemstore.ClaimAcquired || !take || !doubt {
		t.Fatalf("%v take=%v doubt=%v, want the dead holder's key taken over in doubt", state, take, doubt)
	}
	if err := idemstore.Resolvable(rec, true, idemstore.ResolveRetry, t0); err != nil {
		t.Fatalf("Resolvable: %v, want a dead holder's key resolvable", err)
	}
	if got, want := idemstore.AbandonedNote(rec, t0), "attempt 3 by "+dead+" abandoned: its process died without a done mark (its lease ran to 2026-10-27T04:04:05.123456Z)"; got != want {
		t.Fatalf("note %q, want %q", got, want)
	}
}

func TestAbandonedNote(t *testing.T) {
	rec := idemstore.Record{Key: key, Status: idemstore.StatusRunning, Attempt: 12, Owner: "h:7:ab",
		LeaseUntil: time.Date(2026, 10, 27, 5, 4, 5, 7000, time.FixedZone("CEST", 2*3600))}
	for _, c := range []struct {
		name string
		rec  idemstore.Record
		now  time.Time
		want string
	}{
		{"lease expired", rec, rec.LeaseUntil, "attempt 12 by h:7:ab abandoned: lease expired at 2026-10-27T03:04:05.000007Z without a done mark"},
		{"lease held", rec, rec.LeaseUntil.Add(-time.Nanosecond), "attempt 12 by h:7:ab abandoned: its process died without a done mark (its lease ran to 2026-10-27T03:04:05.000007Z)"},
		{"no lease end", idemstore.Record{Attempt: 1, Owner: "h:7:ab"}, t0, "attempt 1 by h:7:ab abandoned: its process died without a done mark"},
	} {
		if got := idemstore.AbandonedNote(c.rec, c.now); got != c.want {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
}

func TestResolvable(t *testing.T) {
	const alive = "elsewhere:1:abcd"
	running := idemstore.Record{Key: key, Status: idemstore.StatusRunning, Attempt: 2, Owner: alive, LeaseUntil: t0.Add(time.Second)}
	for _, c := range []struct {
		name  string
		rec   idemstore.Record
		found bool
		to    idemstore.Resolution
		ok    bool
		msg   string
	}{
		{"no record, retry", idemstore.Record{Key: key}, false, idemstore.ResolveRetry, false, "has no record"},
		{"no record, done", idemstore.Record{Key: key}, false, idemstore.ResolveDone, true, ""},
		{"no record, skip", idemstore.Record{Key: key}, false, idemstore.ResolveSkip, true, ""},
		{"done", idemstore.Record{Key: key, Status: idemstore.StatusDone}, true, idemstore.ResolveSkip, false, "is done"},
		{"held", running, true, idemstore.ResolveDone, false, "held by attempt 2 of " + alive},
		{"lease expired", func() idemstore.Record { r := running; r.LeaseUntil = t0; return r }(), true, idemstore.ResolveRetry, true, ""},
		{"unknown", idemstore.Record{Key: key, Status: idemstore.StatusUnknown}, true, idemstore.ResolveDone, true, ""},
		{"parked", idemstore.Record{Key: key, Status: idemstore.StatusParked}, true, idemstore.ResolveRetry, true, ""},
	} {
		err := idemstore.Resolvable(c.rec, c.found, c.to, t0)
		switch {
		case c.ok && err != nil:
			t.Errorf("%s: %v, want resolvable", c.name, err)
		case !c.ok && (!errors.Is(err, idemstore.ErrNotResolvable) || !strings.Contains(err.Error(), c.msg)):
			t.Errorf("%s: %v, want ErrNotResolvable saying %q", c.name, err, c.msg)
		}
	}
}

func TestResolved(t *testing.T) {
	failed := idemstore.Record{Key: key, Status: idemstore.StatusFailed, LastError: "boom"}
	for _, c := range []struct {
		rec    idemstore.Record
		to     idemstore.Resolution
		status idemstore.Status
		note   string
	}{
		{failed, idemstore.ResolveDone, idemstore.StatusDone, ""},
		{failed, idemstore.ResolveRetry, idemstore.StatusFailed, "resolved for retry (was failed); previous error: boom"},
		{idemstore.Record{Key: key, Status: idemstore.StatusUnknown}, idemstore.ResolveRetry, idemstore.StatusFailed, "resolved for retry (was unknown)"},
		{failed, idemstore.ResolveSkip, idemstore.StatusSkipped, "skipped without running (was failed)"},
		{idemstore.Record{Key: key}, idemstore.ResolveSkip, idemstore.StatusSkipped, "skipped without running (was none)"},
	} {
		status, note := idemstore.Resolved(c.rec, c.to)
		if status != c.status || note != c.note {
			t.Errorf("Resolved(%s, %d): %s %q, want %s %q", c.rec.Status, c.to, status, note, c.status, c.note)
		}
	}
	for _, r := range []idemstore.Resolution{idemstore.ResolveDone, idemstore.ResolveRetry, idemstore.ResolveSkip} {
		if err := r.Validate(); err != nil {
			t.Errorf("%d: %v", r, err)
		}
	}
	for _, r := range []idemstore.Resolution{0, 4, -1} {
		if err := r.Validate(); err == nil || !strings.Contains(err.Error(), "unknown resolution") {
			t.Errorf("%d: %v, want an unknown resolution", r, err)
		}
	}
}

func TestFatal(t *testing.T) {
	base := errors.New("fsync failed")
	err := idemstore.Fatal(base)
	if !idemstore.IsFatal(err) || !errors.Is(err, base) || err.Error() != base.Error() {
		t.Fatalf("Fatal(%v) = %v: IsFatal %v, wraps it %v", base, err, idemstore.IsFatal(err), errors.Is(err, base))
	}
	if w := errors.Join(errors.New("finish"), err); !idemstore.IsFatal(w) {
		t.Fatalf("IsFatal(%v) = false for a wrapped fatal error", w)
	}
	if idemstore.IsFatal(base) || idemstore.Fatal(nil) != nil {
		t.Fatal("IsFatal of a plain error, or Fatal(nil) not nil")
	}
}

func TestTakenOver(t *testing.T) {
	running := idemstore.Record{Key: key, Status: idemstore.StatusRunning, Attempt: 4, Failures: 2, Owner: "h:1:ab", LastError: "old", LeaseUntil: t0}
	got := idemstore.TakenOver(running, t0.Add(time.Second))
	if got.Failures != 3 || got.LastError != idemstore.AbandonedNote(running, t0.Add(time.Second)) || got.Attempt != 4 || got.Status != idemstore.StatusRunning {
		t.Fatalf("TakenOver(running) = %+v", got)
	}
	failed := idemstore.Record{Key: key, Status: idemstore.StatusFailed, Attempt: 4, Failures: 2, LastError: "boom"}
	if got := idemstore.TakenOver(failed, t0); !reflect.DeepEqual(got, failed) {
		t.Fatalf("TakenOver(failed) = %+v, want it unchanged", got)
	}
}

func TestPrunable(t *testing.T) {
	for _, c := range []struct {
		name, through, cursor string
		unsettled             int64
		msg                   string
	}{
		{"no cursor, all settled", "2026-10-27", "", 0, ""},
		{"at the cursor", "2026-10-27", "2026-10-27", 0, ""},
		{"past the cursor", "2026-10-28", "2026-10-27", 0, "catch-up has only settled up to 2026-10-27"},
		{"unsettled", "2026-10-27", "2026-10-30", 2, "2 periods are not settled (the first is 2026-10-01)"},
	} {
		err := idemstore.Prunable("j", c.through, c.cursor, c.unsettled, "2026-10-01")
		if c.msg == "" && err != nil || c.msg != "" && (!errors.Is(err, idemstore.ErrPruneRefused) || !strings.Contains(err.Error(), c.msg)) {
			t.Errorf("%s: %v, want %q", c.name, err, c.msg)
		}
	}
}

func TestEndRules(t *testing.T) {
	k := idemstore.Key{Job: "j", Period: "p"}
	if err := (idemstore.End{Status: idemstore.StatusDone}).Check("s", k); err != nil {
		t.Errorf("done: %v", err)
	}
	if err := (idemstore.End{Status: idemstore.StatusRunning}).Check("s", k); err == nil || !strings.Contains(err.Error(), `s: finish j/p: cannot end an attempt as "running"`) {
		t.Errorf("running: %v", err)
	}
	if err := idemstore.LeaseLost(k, 7); !errors.Is(err, idemstore.ErrLeaseLost) || !strings.Contains(err.Error(), "j/p attempt 7") {
		t.Errorf("LeaseLost: %v", err)
	}
	now := time.Date(2026, 10, 27, 2, 0, 0, 0, time.UTC)
	if d, ok := (idemstore.End{Now: now, NotBefore: now.Add(90 * time.Second)}).BackoffDelay(); !ok || d != 90*time.Second {
		t.Errorf("BackoffDelay: %v, %v; want 1m30s, true", d, ok)
	}
	if d, ok := (idemstore.End{Now: now}).BackoffDelay(); ok || d != 0 {
		t.Errorf("BackoffDelay without a deadline: %v, %v; want 0, false", d, ok)
	}
	if d, ok := (idemstore.End{NotBefore: time.Now().Add(time.Hour)}).BackoffDelay(); !ok || d <= 0 || d > time.Hour {
		t.Errorf("BackoffDelay from the local clock: %v, %v; want (0, 1h]", d, ok)
	}
}
