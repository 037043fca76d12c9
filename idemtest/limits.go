package idemtest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemstore"
	"github.com/idemgo/idem/internal/holder"
	"github.com/idemgo/idem/internal/testwait"
	"github.com/idemgo/idem/limit"
)

// TestLimits runs the conformance suite of idemstore.LimitStore against the
// stores open returns (each call a new, empty store; the store behind it,
// [idemstore.Of], must be an idemstore.LimitStore): a rate's burst and its
// waits; a wait longer than maxWait reserves nothing; limits of two names
// apart; an AtOnce limit's places up to its max, renewed, released, taken
// over when their lease ends or their holder's process has ended, and
// never by a holder that does not hold them.
func TestLimits(t *testing.T, open func(t *testing.T) idem.Store) {
	ls := func(t *testing.T) idemstore.LimitStore {
		st, err := idemstore.Of(open(t))
		if err != nil {
			t.Fatalf("idemtest: TestLimits: %v", err)
		}
		l, ok := st.(idemstore.LimitStore)
		if !ok {
			t.Fatalf("idemtest: TestLimits: the store %T keeps no limits (idemstore.LimitStore)", st)
		}
		return l
	}
	t.Run("RateBurstThenWait", func(t *testing.T) { limitRateBurst(t, ls(t)) })
	t.Run("SlotsUpToMax", func(t *testing.T) { limitSlotsUpToMax(t, ls(t)) })
	t.Run("LeaseEnds", func(t *testing.T) { limitLeaseEnds(t, ls(t)) })
	t.Run("HolderGone", func(t *testing.T) {
		dead := holder.EndedForTest()
		if dead == "" {
			t.Skip("this system cannot tell that a process has ended (idemstore.HolderGone)")
		}
		limitHolderGone(t, ls(t), dead)
	})
}

// limitRateBurst: a rate's burst starts at once, the next start waits
// (reserved only within maxWait; asked again, the same answer), n starts
// wait n times as long, and a limit of another name is apart.
func limitRateBurst(t *testing.T, s idemstore.LimitStore) {
	ctx := context.Background()
	r := idemstore.Rate{PerSecond: 1.0 / 3600, Burst: 3} // one an hour: no wait here ends by itself
	for i := range 3 {
		if wait, ok, err := s.TakeRate(ctx, "a", r, 1, time.Minute); err != nil || !ok || wait != 0 {
			t.Fatalf("start %d of a burst of 3: wait %v, reserved %v, %v; want at once", i+1, wait, ok, err)
		}
	}
	// The fourth waits about an hour: more than maxWait, so nothing
	// is reserved, and asking again says the same.
	for range 2 {
		wait, ok, err := s.TakeRate(ctx, "a", r, 1, time.Minute)
		if err != nil || ok || wait < 58*time.Minute || wait > time.Hour {
			t.Fatalf("start 4: wait %v, reserved %v, %v; want not reserved, ask again in about 59 minutes", wait, ok, err)
		}
	}
	wait, ok, err := s.TakeRate(ctx, "a", r, 1, 2*time.Hour)
	if err != nil || !ok || wait < 59*time.Minute || wait > time.Hour {
		t.Fatalf("start 4 with maxWait 2h: wait %v, reserved %v, %v; want reserved, about an hour", wait, ok, err)
	}
	wait, ok, err = s.TakeRate(ctx, "a", r, 2, 4*time.Hour)
	if err != nil || !ok || wait < 179*time.Minute || wait > 3*time.Hour {
		t.Fatalf("starts 5 and 6: wait %v, reserved %v, %v; want about 3 hours", wait, ok, err)
	}
	// Another name is another limit.
	if wait, ok, err := s.TakeRate(ctx, "b", r, 3, time.Minute); err != nil || !ok || wait != 0 {
		t.Fatalf("limit b: wait %v, reserved %v, %v; want at once", wait, ok, err)
	}
}

// limitSlotsUpToMax: an AtOnce limit gives places up to its max, numbered
// from 0; they are renewed and released by their holder alone, a released
// place is given again, and a smaller max counts the places held.
func limitSlotsUpToMax(t *testing.T, s idemstore.LimitStore) {
	ctx := context.Background()
	hs := []idemstore.SlotHolder{{Owner: idemstore.Owner(), Token: "t1"}, {Owner: idemstore.Owner(), Token: "t2"}, {Owner: idemstore.Owner(), Token: "t3"}}
	var slots []int
	for _, h := range hs[:2] {
		n, ok, _, err := s.AcquireSlot(ctx, "x", 2, h, time.Hour)
		if err != nil || !ok {
			t.Fatalf("acquire a place of 2 for %s: ok %v, %v", h.Token, ok, err)
		}
		slots = append(slots, n)
	}
	if slots[0] == slots[1] || min(slots[0], slots[1]) < 0 || max(slots[0], slots[1]) > 1 {
		t.Fatalf("places %v; want 0 and 1", slots)
	}
	_, ok, wait, err := s.AcquireSlot(ctx, "x", 2, hs[2], time.Hour)
	if err != nil || ok || wait <= 0 || wait > time.Hour {
		t.Fatalf("a third holder of 2: ok %v, wait %v, %v; want refused, wait up to an hour", ok, wait, err)
	}
	if n, ok, _, err := s.AcquireSlot(ctx, "y", 1, hs[2], time.Hour); err != nil || !ok || n != 0 {
		t.Fatalf("limit y: place %d, ok %v, %v; want 0", n, ok, err)
	}
	if held, err := s.RenewSlot(ctx, "x", slots[0], hs[0], time.Hour); err != nil || !held {
		t.Fatalf("renew t1's place: held %v, %v", held, err)
	}
	if held, err := s.RenewSlot(ctx, "x", slots[0], hs[1], time.Hour); err != nil || held {
		t.Fatalf("renew t1's place as t2: held %v, %v; want not held", held, err)
	}
	if err := s.ReleaseSlot(ctx, "x", slots[0], hs[1]); err != nil {
		t.Fatal(err)
	}
	if _, ok, _, err := s.AcquireSlot(ctx, "x", 2, hs[2], time.Hour); err != nil || ok {
		t.Fatalf("after t2 released t1's place (it holds another): ok %v, %v; want still full", ok, err)
	}
	if err := s.ReleaseSlot(ctx, "x", slots[0], hs[0]); err != nil {
		t.Fatal(err)
	}
	if held, err := s.RenewSlot(ctx, "x", slots[0], hs[0], time.Hour); err != nil || held {
		t.Fatalf("renew a released place: held %v, %v; want not held", held, err)
	}
	if n, ok, _, err := s.AcquireSlot(ctx, "x", 2, hs[2], time.Hour); err != nil || !ok || n != slots[0] {
		t.Fatalf("after a release: place %d, ok %v, %v; want place %d", n, ok, err, slots[0])
	}
	// A smaller max counts the places held, whatever their numbers.
	if _, ok, _, err := s.AcquireSlot(ctx, "x", 1, idemstore.SlotHolder{Owner: idemstore.Owner(), Token: "t4"}, time.Hour); err != nil || ok {
		t.Fatalf("max 1 with 2 held: ok %v, %v; want refused", ok, err)
	}
}

// limitLeaseEnds: the place of a holder of another host is taken over once
// its lease ends, and from then on renewed by the new holder alone.
func limitLeaseEnds(t *testing.T, s idemstore.LimitStore) {
	ctx := context.Background()
	// A holder of another host: only its lease can end its hold.
	other := idemstore.SlotHolder{Owner: "elsewhere.invalid:1:00000000", Token: "old"}
	if _, ok, _, err := s.AcquireSlot(ctx, "z", 1, other, time.Second); err != nil || !ok {
		t.Fatalf("acquire: ok %v, %v", ok, err)
	}
	h := idemstore.SlotHolder{Owner: idemstore.Owner(), Token: "new"}
	var n int
	testwait.Until(t, func() bool {
		var ok bool
		var err error
		n, ok, _, err = s.AcquireSlot(ctx, "z", 1, h, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			time.Sleep(100 * time.Millisecond)
		}
		return ok
	}, "the place of a holder whose 1-second lease ended")
	if held, err := s.RenewSlot(ctx, "z", n, other, time.Hour); err != nil || held {
		t.Fatalf("the old holder renews the place taken over: held %v, %v; want not held", held, err)
	}
	if held, err := s.RenewSlot(ctx, "z", n, h, time.Hour); err != nil || !held {
		t.Fatalf("the new holder renews: held %v, %v", held, err)
	}
}

// limitHolderGone: the place of a holder whose process has ended (dead,
// its owner) is taken at once, whatever its lease.
func limitHolderGone(t *testing.T, s idemstore.LimitStore, dead string) {
	ctx := context.Background()
	if _, ok, _, err := s.AcquireSlot(ctx, "g", 1, idemstore.SlotHolder{Owner: dead, Token: "dead"}, time.Hour); err != nil || !ok {
		t.Fatalf("acquire: ok %v, %v", ok, err)
	}
	if _, ok, _, err := s.AcquireSlot(ctx, "g", 1, idemstore.SlotHolder{Owner: idemstore.Owner(), Token: "live"}, time.Hour); err != nil || !ok {
		t.Fatalf("the place of a holder whose process ended, its lease an hour: ok %v, %v; want taken at once", ok, err)
	}
}

// LimitHarness opens one store from several processes, for
// [TestSharedLimits].
type LimitHarness struct {
	// New creates a new, empty store and returns where it is: a string
	// that Open, in another process, opens it by. It runs again in each
	// child (everything a test does before [Start] does): a New that
	// creates what t's cleanups remove (a database schema, say) should
	// create nothing when [IsChild](t), since a child exits without
	// running them; the child is given the parent's where.
	New func(t *testing.T) string
	// Open opens the store at where, in this process (a child's too).
	Open func(t *testing.T, where string) idem.Store
}

// TestSharedLimits runs limits of package limit in three processes (this
// test binary, re-executed) that share a store, and measures them from a
// receiver in this process: a rate of 200 a second over items of
// idem.Each, or over Runs of a key each where the store keeps no items
// (idemstore.ItemStore; the three together stay within it: the test fails
// above 110 %, and logs the rate it measured), an AtOnce limit of 2 over Runs
// (never more than 2 at once at the receiver), and the place of a holder
// killed with SIGKILL coming back (at once where the store can tell that
// its process ended; the lease is an hour).
func TestSharedLimits(t *testing.T, h LimitHarness) {
	t.Run("Rate", func(t *testing.T) { testSharedRate(t, h) })
	t.Run("AtOnce", func(t *testing.T) { testSharedAtOnce(t, h) })
	t.Run("KilledHolder", func(t *testing.T) { testKilledHolder(t, h) })
}

// limitReceiver counts requests: their times, and how many ran at once.
type limitReceiver struct {
	mu      sync.Mutex
	times   []time.Time
	items   map[string]int // /item's who and item: how many times each arrived
	now     int
	most    int
	started int
	ended   int
	held    chan string
}

func newLimitReceiver(t *testing.T) (*limitReceiver, *httptest.Server) {
	rc := &limitReceiver{held: make(chan string, 16)}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rc.mu.Lock()
		defer rc.mu.Unlock()
		switch r.URL.Path {
		case "/item":
			rc.times = append(rc.times, time.Now())
			if rc.items == nil {
				rc.items = map[string]int{}
			}
			rc.items[r.URL.Query().Get("who")+"/"+r.URL.Query().Get("item")]++
		case "/start":
			rc.started++
			rc.now++
			rc.most = max(rc.most, rc.now)
		case "/end":
			rc.ended++
			rc.now--
		case "/held":
			rc.held <- r.URL.Query().Get("who")
		}
	}))
	t.Cleanup(srv.Close)
	return rc, srv
}

func get(ctx context.Context, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return nil
}

// childArgs is what a child of TestSharedLimits is told: the store and the
// limitReceiver, and its number.
func childArgs(where, url string, i int) string {
	return strings.Join([]string{where, url, strconv.Itoa(i)}, "\n")
}

func parseChildArgs(arg string) (where, url string, i int) {
	p := strings.Split(arg, "\n")
	i, _ = strconv.Atoi(p[2])
	return p[0], p[1], i
}

func childFail(format string, args ...any) {
	fmt.Printf("child: "+format+"\n", args...)
	panic(fmt.Sprintf(format, args...)) // the child exits non-zero
}

const (
	sharedRate  = 200.0
	sharedBurst = 10
	rateItems   = 400 // per process: 6 s at the rate, so that a stall of the whole machine at the start (arrivals bunched) stays within the 10 %
	// sharedWorkers per process ask for starts at once: enough that the
	// limit, not a process's own round trips, sets the pace (the first
	// process runs alone until the others have started).
	sharedWorkers = 8
)

// inThreeProcesses runs child in three processes (this test binary,
// re-executed), each with the store of a new where of h opened there, the
// URL of a receiver in this process and its number; it returns the
// receiver once all three have exited 0.
func inThreeProcesses(t *testing.T, h LimitHarness, child func(s idem.Store, url string, i int)) *limitReceiver {
	where := h.New(t)
	rc, srv := newLimitReceiver(t)
	var children []*Child
	for i := range 3 {
		children = append(children, Start(t, childArgs(where, srv.URL, i), func(arg string) {
			where, url, i := parseChildArgs(arg)
			child(h.Open(t, where), url, i)
		}))
	}
	for i, c := range children {
		if ex := c.Wait(); ex.Code != 0 {
			t.Fatalf("child %d: exit %+v\n%s", i, ex, ex.Output)
		}
	}
	return rc
}

func testSharedRate(t *testing.T, h LimitHarness) {
	rc := inThreeProcesses(t, h, func(s idem.Store, url string, i int) {
		r, err := limit.NewRate(s, "mail", sharedRate, sharedBurst)
		if err != nil {
			childFail("%v", err)
		}
		items := make([]string, rateItems)
		for j := range items {
			items[j] = fmt.Sprintf("m%04d", j)
		}
		key := idem.Key{Job: fmt.Sprintf("mail-%d", i), Period: "2026-12-02"}
		send := func(ctx context.Context) error {
			info, _ := idem.InfoFrom(ctx)
			item := info.Item
			if item == "" { // runEach's Run: the item is the period's last part
				item = info.Key.Period[strings.LastIndex(info.Key.Period, "/")+1:]
			}
			return get(ctx, url+"/item?who="+strconv.Itoa(i)+"&item="+item)
		}
		if st, err := idemstore.Of(s); err == nil {
			if _, ok := st.(idemstore.ItemStore); !ok {
				runEach(s, key, items, send, r) // a store without items (Redis)
				return
			}
		}
		_, err = idem.Each(context.Background(), s, key, idem.Items(slices.Values(items)), func(ctx context.Context, item string) error {
			return send(ctx)
		}, idem.WithLimits(r), idem.WithWorkers(sharedWorkers))
		if err != nil {
			childFail("Each %s: %v", key, err)
		}
	})
	rc.mu.Lock()
	times := slices.Clone(rc.times)
	distinct := len(rc.items)
	rc.mu.Unlock()
	// Each is at least once: an item whose attempt stalled past its lease
	// (a busy machine) may be sent again. Every item arrives; the
	// repeats are counted, not forbidden.
	if distinct != 3*rateItems {
		t.Fatalf("the receiver saw %d distinct items (%d arrivals), want %d", distinct, len(times), 3*rateItems)
	}
	if len(times) > distinct {
		t.Logf("%d items arrived again (at least once: an attempt taken over after its lease)", len(times)-distinct)
	}
	slices.SortFunc(times, func(a, b time.Time) int { return a.Compare(b) })
	span := times[len(times)-1].Sub(times[0]).Seconds()
	// After the burst, one start per interval: len-burst starts in span.
	got := float64(len(times)-sharedBurst) / span
	t.Logf("3 processes, rate %v/s burst %d: the receiver saw %d items in %.2fs: %.1f/s (%.1f%% of the limit)",
		sharedRate, sharedBurst, len(times), span, got, 100*got/sharedRate)
	if got > 1.1*sharedRate {
		t.Errorf("the receiver saw %.1f items a second, more than the limit %v/s by over 10%%", got, sharedRate)
	}
}

// runEach is testSharedRate's idem.Each for a store that keeps no items
// (idemstore.ItemStore): a Run per item, of key's job with the item as
// its period, sharedWorkers at a time, each waiting for a start of r.
func runEach(s idem.Store, key idem.Key, items []string, send func(context.Context) error, r *limit.Rate) {
	work := make(chan string)
	errs := make(chan error, len(items))
	var wg sync.WaitGroup
	for range sharedWorkers {
		wg.Go(func() {
			for item := range work {
				errs <- idem.RunOn(context.Background(), s, idem.Key{Job: key.Job, Period: key.Period + "/" + item}, send, idem.WithLimits(r))
			}
		})
	}
	for _, item := range items {
		work <- item
	}
	close(work)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			childFail("Run of %s's items: %v", key, err)
		}
	}
}

func testSharedAtOnce(t *testing.T, h LimitHarness) {
	const most, runs = 2, 8
	rc := inThreeProcesses(t, h, func(s idem.Store, url string, i int) {
		a, err := limit.NewAtOnce(s, "report", most, 0)
		if err != nil {
			childFail("%v", err)
		}
		var wg sync.WaitGroup
		errs := make(chan error, runs)
		for j := range runs {
			wg.Go(func() {
				key := idem.Key{Job: "report", Period: fmt.Sprintf("p%d-%d", i, j)}
				errs <- idem.RunOn(context.Background(), s, key, func(ctx context.Context) error {
					if err := get(ctx, url+"/start"); err != nil {
						return err
					}
					time.Sleep(20 * time.Millisecond) // the work: others may come meanwhile
					return get(ctx, url+"/end")
				}, idem.WithLimits(a))
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				childFail("%v", err)
			}
		}
	})
	rc.mu.Lock()
	defer rc.mu.Unlock()
	t.Logf("3 processes, %d runs each, at once %d: the receiver saw at most %d at once", runs, most, rc.most)
	if rc.started != 3*runs || rc.ended != 3*runs {
		t.Fatalf("the receiver saw %d starts and %d ends, want %d", rc.started, rc.ended, 3*runs)
	}
	if rc.most > most {
		t.Fatalf("the receiver saw %d runs at once, more than the limit %d", rc.most, most)
	}
}

func testKilledHolder(t *testing.T, h LimitHarness) {
	if holder.EndedForTest() == "" {
		t.Skip("this system cannot tell that a process has ended (idemstore.HolderGone)")
	}
	where := h.New(t)
	rc, srv := newLimitReceiver(t)
	c := Start(t, childArgs(where, srv.URL, 0), func(arg string) {
		where, url, _ := parseChildArgs(arg)
		s := h.Open(t, where)
		a, err := limit.NewAtOnce(s, "settle", 1, time.Hour)
		if err != nil {
			childFail("%v", err)
		}
		err = idem.RunOn(context.Background(), s, idem.Key{Job: "settle", Period: "2026-12-01"}, func(ctx context.Context) error {
			if err := get(ctx, url+"/held?who=child"); err != nil {
				return err
			}
			select {} // held until killed
		}, idem.WithLimits(a))
		childFail("the run ended: %v", err)
	})
	testwait.Recv(t, rc.held, "the child holding the only place of limit settle")
	c.Kill()
	ex := c.Wait()
	if !ex.Killed {
		t.Fatalf("the child was killed, but: %+v", ex)
	}
	s := h.Open(t, where)
	a, err := limit.NewAtOnce(s, "settle", 1, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	// Its lease is an hour: only its process's end gives the place back
	// within the wait's deadline.
	ctx, cancel := context.WithTimeout(context.Background(), testwait.Limit(t))
	defer cancel()
	slot, err := a.Acquire(ctx)
	if err != nil {
		t.Fatalf("the place of the killed holder (lease an hour) did not come back: %v", err)
	}
	if err := slot.Release(); err != nil {
		t.Fatal(err)
	}
	// A run of another key may go now.
	if err := idem.RunOn(ctx, s, idem.Key{Job: "settle", Period: "2026-12-02"}, func(context.Context) error { return nil }, idem.WithLimits(a)); err != nil && !errors.Is(err, idem.ErrDeferred) {
		t.Fatal(err)
	} else if err != nil {
		t.Fatalf("a run after the place came back: %v", err)
	}
}
