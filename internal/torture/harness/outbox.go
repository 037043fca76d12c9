package harness

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemstore"
	"github.com/idemgo/idem/outbox"
)

// The outbox mode (-mode outbox): every key is a business transaction
// (the store's RunTx) that bumps the key's row, writing the attempt's nonce
// into it, and queues 1 to 3 messages (outbox.Put) on a few topics, each
// carrying that nonce. Some attempts are rolled back on purpose (fn returns
// an error after its Puts: the first attempt of every fourth key), and
// some keys never commit (every tenth: fn always fails, and the key parks
// after two attempts). Every worker also runs a relay (idem.Relay with the
// Webhook deliverer) that posts the messages to a receiver in the torture
// process, on loopback, which records every delivery in arrival order and
// answers 503 to one in twenty (a failed attempt: the relay backs off and
// retries). The kills hit the workers' transactions and their relays
// alike. A worker ends once its keys are settled and the outbox has no
// pending message.
//
// The checker compares the deliveries with what committed (the business
// rows and the store's outbox, in its order):
//
//   - every message of a committed transaction is delivered at least once
//     (a committed message never delivered, or parked, is lost);
//   - no message of a rolled-back transaction is ever delivered: a
//     delivered message's nonce is the one its key's row holds (a rolled
//     back attempt's or a killed one's nonce is not), and keys that never
//     committed have none delivered;
//   - per topic, no message is delivered before every earlier message of
//     its topic (in the store's order) has been delivered;
//   - a receiver that dedupes by the id applies each message exactly
//     once: every message has one id, the same at every delivery, and it is
//     the key's request id and the message's index;
//   - the business row of a committed key was bumped once (n = 1).

// OutboxRunner runs the outbox mode's transactions on a store with an
// outbox (a Handle's Outbox).
type OutboxRunner interface {
	// Setup creates the business table (called once by the parent).
	Setup(ctx context.Context) error
	// RunTx runs key with the store's RunTx; fn is the attempt, given its
	// transaction's operations.
	RunTx(ctx context.Context, key idem.Key, fn func(ctx context.Context, tx OutboxTx) error, opts ...idem.Option) error
	// Rows returns the business rows: per key ("job/period"), how often it
	// was bumped and the nonce of the last bump.
	Rows(ctx context.Context) (map[string]Row, error)
	// Store is the relay's side of the outbox.
	Store() OutboxStore
}

// OutboxStore is a store with an outbox, as the relays and the check see
// it.
type OutboxStore interface {
	idem.Store
	ListOutbox(ctx context.Context, f idemstore.OutboxFilter) ([]idemstore.OutboxRecord, error)
}

// OutboxTx is the transaction of one attempt of the outbox mode.
type OutboxTx interface {
	// Bump applies n = n + 1 to key's row and sets its nonce.
	Bump(ctx context.Context, nonce string) error
	// Put queues msg in the transaction (outbox.Put with the transaction).
	Put(ctx context.Context, msg outbox.Message) (string, error)
}

// Row is a business row of the outbox mode.
type Row struct {
	N     int
	Nonce string
}

// outboxTopics is how many topics the messages are spread over.
const outboxTopics = 4

// outboxPlan is what the outbox mode does with one key.
type outboxPlan struct {
	msgs      int  // messages per attempt
	topic0    int  // the first message's topic; message i's is (topic0+i) % outboxTopics
	doomed    bool // the first attempt puts its messages, then fails (rolled back)
	abandoned bool // every attempt fails: the key never commits, and parks
}

func planFor(k idem.Key) outboxPlan {
	h := fnv.New32a()
	io.WriteString(h, k.String())
	x := h.Sum32()
	return outboxPlan{msgs: 1 + int(x%3), topic0: int(x/3) % outboxTopics, doomed: (x/12)%4 == 0, abandoned: (x/48)%10 == 0}
}

func topicName(i int) string { return fmt.Sprintf("topic%d", i%outboxTopics) }

// outboxBody is a message's payload.
type outboxBody struct {
	Key    string `json:"key"`
	I      int    `json:"i"`
	Nonce  string `json:"nonce"`
	Doomed bool   `json:"doomed,omitempty"` // put by an attempt that fails on purpose
}

// errDoomed is the failure of an attempt rolled back on purpose.
var errDoomed = errors.New("torture: rolled back on purpose after the Puts")

// attemptOutbox is fn of the outbox mode for key, in worker w.
func (w *worker) attemptOutbox(key idem.Key) func(ctx context.Context, tx OutboxTx) error {
	plan := planFor(key)
	return func(ctx context.Context, tx OutboxTx) error {
		info, _ := idem.InfoFrom(ctx)
		nonce := fmt.Sprintf("%s.a%d.%08x", strings.Fields(string(w.lg))[0], info.Attempt, w.sleep.Uint32())
		doomed := plan.abandoned || plan.doomed && info.Attempt == 1
		w.pause()
		if err := tx.Bump(ctx, nonce); err != nil {
			return err
		}
		for i := range plan.msgs {
			body, _ := json.Marshal(outboxBody{Key: key.String(), I: i, Nonce: nonce, Doomed: doomed})
			if _, err := tx.Put(ctx, outbox.Message{Topic: topicName(plan.topic0 + i), Payload: body,
				Headers: map[string]string{"Content-Type": "application/json"}}); err != nil {
				return err
			}
			if i == 0 {
				w.pause()
			}
		}
		w.pause()
		if doomed {
			return errDoomed
		}
		return nil
	}
}

// runOutboxKey runs one key of the outbox mode once. settled: it is done,
// or (an abandoned key) parked.
func (w *worker) runOutboxKey(ctx context.Context, key idem.Key) bool {
	var res idem.Result
	opts := append(w.txOpts[:len(w.txOpts):len(w.txOpts)], idem.ReportTo(&res))
	if planFor(key).abandoned {
		opts = append(opts, idem.WithBackoff(idem.MaxAttempts(2, idem.Constant(time.Millisecond))))
	}
	w.current.Store(&inRun{key: key, since: time.Now()})
	err := w.h.Outbox.RunTx(ctx, key, w.attemptOutbox(key), opts...)
	w.current.Store(nil)
	switch {
	case err == nil && res.Outcome != idem.AlreadyDone:
		w.lg.printf("run %s: a%d %s", key, res.Attempt, res.Outcome)
	case err != nil && err.Error() != w.lastErr[key]:
		w.lg.printf("run %s: a%d %s: %v", key, res.Attempt, res.Outcome, err)
		w.lastErr[key] = err.Error()
	}
	return err == nil || planFor(key).abandoned && errors.Is(err, idem.ErrParked)
}

// loopOutbox is the outbox mode's worker: a relay in the background, the
// keys in a random order until each is settled, then the relay until the
// outbox has nothing pending.
func (w *worker) loopOutbox(ctx context.Context) int {
	if w.h.Outbox == nil {
		w.lg.printf("setup: -store %s has no outbox", w.cfg.Store)
		return workerSetup
	}
	store := w.h.Outbox.Store()
	rctx, stopRelay := context.WithCancel(ctx)
	relayDone := make(chan struct{})
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
	go func() {
		defer close(relayDone)
		err := outbox.Relay(rctx, store, outbox.Webhook(w.cfg.URL, client),
			outbox.WithLease(relayLease(w.cfg.Lease)), outbox.WithPoll(2*time.Millisecond), outbox.WithBatch(outboxTopics),
			outbox.WithBackoff(idem.MaxAttempts(100_000, idem.Constant(2*time.Millisecond))),
			outbox.WithOwner(strings.Fields(string(w.lg))[0]),
			outbox.OnDelivery(func(r outbox.DeliveryResult) {
				if r.Outcome == outbox.DeliverySent {
					w.progress.Store(time.Now().UnixNano())
				}
			}))
		if err != nil {
			w.lg.printf("relay: %v", err)
		}
	}()
	defer func() { stopRelay(); <-relayDone }()

	var keys []idem.Key
	for _, ks := range makeKeys(w.cfg.Keys) {
		keys = append(keys, ks...)
	}
	w.rng.Shuffle(len(keys), func(i, j int) { keys[i], keys[j] = keys[j], keys[i] })
	for len(keys) > 0 {
		if time.Now().After(w.cfg.Deadline) {
			w.lg.printf("deadline: %d keys unsettled, first %s", len(keys), keys[0])
			return workerDeadline
		}
		var left []idem.Key
		for _, k := range keys {
			if w.runOutboxKey(ctx, k) {
				w.progress.Store(time.Now().UnixNano())
			} else {
				left = append(left, k)
			}
		}
		if len(left) == len(keys) {
			time.Sleep(time.Duration(1+w.rng.IntN(5)) * time.Millisecond)
		}
		keys = left
	}
	w.lg.printf("keys settled; relaying until nothing is pending")
	for {
		if time.Now().After(w.cfg.Deadline) {
			w.lg.printf("deadline: messages still pending")
			return workerDeadline
		}
		pending, err := store.ListOutbox(ctx, idemstore.OutboxFilter{Status: idemstore.OutboxPending, Limit: 1})
		switch {
		case err != nil:
			w.lg.printf("list pending: %v", err)
		case len(pending) == 0:
			w.lg.printf("finished")
			return workerOK
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// relayLease is the relays' lease: the run's, but at least a second. A
// delivery's deadline is its lease, and a topic hands out one message at a
// time: with the runs' 100 ms, a receiver slowed by a loaded machine (the
// race detector and other work on 2 cores) made most deliveries time out,
// and the topics did not drain before the deadline. A killed relay's
// message waits a second for the next.
func relayLease(run time.Duration) time.Duration { return max(run, time.Second) }

// delivery is one request the receiver got.
type delivery struct {
	ID, Topic string
	Body      outboxBody
	Refused   bool // answered 503
}

// receiver is the outbox mode's downstream: an HTTP server on loopback in
// the torture process (never killed) that records every delivery in the
// order it arrives, and refuses one in twenty with 503.
type receiver struct {
	srv *http.Server
	url string
	log *os.File // deliveries.log: one JSON line per request, for a kept directory

	mu   sync.Mutex
	got  []delivery
	bad  []string // requests it could not read
	rng  *rand.Rand
	done chan struct{}
}

func startReceiver(dir string, seed int64) (*receiver, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("receiver: %w", err)
	}
	f, err := os.Create(filepath.Join(dir, "deliveries.log"))
	if err != nil {
		ln.Close()
		return nil, err
	}
	r := &receiver{url: "http://" + ln.Addr().String() + "/deliver", log: f,
		rng: rand.New(rand.NewPCG(uint64(seed), 0x0b0c)), done: make(chan struct{})}
	r.srv = &http.Server{Handler: r, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		defer close(r.done)
		_ = r.srv.Serve(ln)
	}()
	return r, nil
}

func (r *receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	b, err := io.ReadAll(io.LimitReader(req.Body, 1<<20))
	d := delivery{ID: req.Header.Get("Idempotency-Key"), Topic: req.Header.Get("Idem-Topic")}
	if err == nil {
		err = json.Unmarshal(b, &d.Body)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil || d.ID == "" {
		// A relay killed while sending leaves a torn request: not a delivery.
		r.bad = append(r.bad, fmt.Sprintf("id %q: %v: %q", d.ID, err, b))
		http.Error(w, "bad request", http.StatusServiceUnavailable)
		return
	}
	d.Refused = r.rng.IntN(20) == 0
	r.got = append(r.got, d)
	line, _ := json.Marshal(d)
	r.log.Write(append(line, '\n'))
	if d.Refused {
		http.Error(w, "try again", http.StatusServiceUnavailable)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (r *receiver) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = r.srv.Shutdown(ctx)
	<-r.done
	r.log.Close()
}

// deliveries returns what the receiver got, in arrival order.
func (r *receiver) deliveries() []delivery {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]delivery(nil), r.got...)
}

// outboxStats are the outbox mode's figures, printed before the last line.
type outboxStats struct {
	committed   int // messages of committed transactions (in the store)
	requests    int // deliveries the receiver got, refused ones included
	refused     int // answered 503
	redelivered int // accepted deliveries of a message already accepted
	applied     int // messages a receiver deduping by id applied
	rolledBack  int // keys whose first attempt was rolled back on purpose
	abandoned   int // keys that never commit
}

// checkOutbox compares the deliveries with the store's outbox and the
// business rows: the keys' rows and records (outboxRowViolations), the
// store's messages (outboxStoreViolations), then the deliveries
// (deliveryViolations). It prints the mode's figures.
func (r *runner) checkOutbox(ctx context.Context, h *Handle, s *Summary) ([]violation, error) {
	rows, err := h.Outbox.Rows(ctx)
	if err != nil {
		return nil, fmt.Errorf("check: read business rows: %w", err)
	}
	stored, err := h.Outbox.Store().ListOutbox(ctx, idemstore.OutboxFilter{})
	if err != nil {
		return nil, fmt.Errorf("check: list the outbox: %w", err)
	}
	got := r.recv.deliveries()
	var st outboxStats
	keyOf := map[string]idem.Key{}
	for _, ks := range makeKeys(r.cfg.Keys) {
		for _, k := range ks {
			keyOf[k.String()] = k
		}
	}
	vs, err := r.outboxRowViolations(ctx, h, rows, s, &st)
	if err != nil {
		return nil, err
	}
	storeVs, inStore, order := r.outboxStoreViolations(stored, rows, keyOf, s, &st)
	vs = append(vs, storeVs...)
	firstAt, deliveryVs := deliveryViolations(got, rows, keyOf, inStore, order, &st)
	vs = append(vs, deliveryVs...)
	for id, m := range inStore {
		if _, ok := firstAt[id]; !ok && m.Status == idemstore.OutboxDelivered {
			vs = append(vs, violation{m.Key, "delivered-unseen", fmt.Sprintf("message %s is marked delivered, but the receiver never accepted it", id)})
		}
	}
	if st.applied != st.committed {
		s.Errors = append(s.Errors, fmt.Sprintf("the deduping receiver applied %d messages; %d committed", st.applied, st.committed))
	}
	r.recv.mu.Lock()
	for _, b := range r.recv.bad {
		r.printf("receiver: torn request (a relay killed while sending): %s", shorten(b, 120))
	}
	r.recv.mu.Unlock()
	r.printf("outbox: messages=%d requests=%d refused=%d redelivered=%d applied=%d rolledback_keys=%d abandoned_keys=%d",
		st.committed, st.requests, st.refused, st.redelivered, st.applied, st.rolledBack, st.abandoned)
	s.Violations = len(vs)
	return vs, nil
}

// outboxRowViolations checks each key's business row and record: at most
// one effect; an abandoned key has none and is parked; any other is done,
// with its effect. It counts the effects, duplicates and losses in s, and
// the keys rolled back on purpose and abandoned in st.
func (r *runner) outboxRowViolations(ctx context.Context, h *Handle, rows map[string]Row, s *Summary, st *outboxStats) ([]violation, error) {
	var vs []violation
	for _, ks := range makeKeys(r.cfg.Keys) {
		for _, k := range ks {
			plan := planFor(k)
			if plan.doomed && !plan.abandoned {
				st.rolledBack++
			}
			row := rows[k.String()]
			s.Effects += row.N
			rec, ok, err := h.Store.Lookup(ctx, k)
			if err != nil {
				return nil, fmt.Errorf("check: lookup %s: %w", k, err)
			}
			desc := fmt.Sprintf("n=%d status=%s attempt=%d", row.N, rec.Status, rec.Attempt)
			if !ok {
				desc = fmt.Sprintf("n=%d no record", row.N)
			}
			if row.N > 1 {
				s.Duplicates += row.N - 1
				vs = append(vs, violation{k, "duplicate", desc})
			}
			switch {
			case plan.abandoned:
				st.abandoned++
				if row.N != 0 {
					vs = append(vs, violation{k, "abandoned-committed", desc})
				}
				if !ok || rec.Status != idem.StatusParked {
					s.Lost++
					vs = append(vs, violation{k, "lost", desc + " (want parked)"})
				}
			case ok && rec.Status == idem.StatusDone:
				if row.N == 0 {
					s.NoEffect++
					vs = append(vs, violation{k, "done-without-effect", desc})
				}
			default:
				s.Lost++
				vs = append(vs, violation{k, "lost", desc})
			}
		}
	}
	return vs, nil
}

// outboxStoreViolations checks the store's outbox (stored): one message
// per committed (key, index), with the committed nonce and a stable id,
// delivered. It returns the messages by id (inStore) and each topic's ids
// in the store's order, which the deliveries are checked against.
func (r *runner) outboxStoreViolations(stored []idemstore.OutboxRecord, rows map[string]Row, keyOf map[string]idem.Key, s *Summary, st *outboxStats) (vs []violation, inStore map[string]idemstore.OutboxRecord, order map[string][]string) {
	inStore = map[string]idemstore.OutboxRecord{}
	order = map[string][]string{} // topic -> ids in the store's order
	for _, m := range stored {
		inStore[m.ID] = m
		order[m.Topic] = append(order[m.Topic], m.ID)
		var b outboxBody
		k := keyOf[m.Key.String()]
		if err := json.Unmarshal(m.Payload, &b); err != nil || k.Job == "" {
			s.Errors = append(s.Errors, fmt.Sprintf("outbox message %s of %s: payload %q: %v", m.ID, m.Key, m.Payload, err))
			continue
		}
		st.committed++
		row := rows[b.Key]
		if b.Nonce != row.Nonce || b.Doomed {
			vs = append(vs, violation{k, "rolled-back-message-committed", fmt.Sprintf("message %s nonce %s doomed=%v; the row's nonce %q", m.ID, b.Nonce, b.Doomed, row.Nonce)})
		}
		if want := fmt.Sprintf("%s-%d", k.RequestID(), b.I); m.ID != want {
			vs = append(vs, violation{k, "unstable-id", fmt.Sprintf("message %d has id %s, want %s", b.I, m.ID, want)})
		}
		if m.Status != idemstore.OutboxDelivered {
			s.Lost++
			vs = append(vs, violation{k, "undelivered", fmt.Sprintf("message %s is %s after %d attempts: %s", m.ID, m.Status, m.Attempts, m.LastError)})
		}
	}
	for _, ks := range makeKeys(r.cfg.Keys) {
		for _, k := range ks {
			plan := planFor(k)
			if plan.abandoned || rows[k.String()].N == 0 {
				continue
			}
			for i := range plan.msgs {
				if _, ok := inStore[fmt.Sprintf("%s-%d", k.RequestID(), i)]; !ok {
					s.Lost++
					vs = append(vs, violation{k, "message-missing", fmt.Sprintf("message %d of the committed transaction is not in the outbox", i)})
				}
			}
		}
	}
	return vs, inStore, order
}

// deliveryViolations checks the deliveries the receiver got: only
// committed messages (inStore), each on its topic, in the store's order of
// the topic (order), each message under one id. It counts the requests,
// refusals, redeliveries and messages applied in st, and returns where
// each id was first accepted (firstAt: position in got).
func deliveryViolations(got []delivery, rows map[string]Row, keyOf map[string]idem.Key, inStore map[string]idemstore.OutboxRecord, order map[string][]string, st *outboxStats) (firstAt map[string]int, vs []violation) {
	type msgKey struct {
		key string
		i   int
	}
	firstAt = map[string]int{} // id -> position of its first accepted delivery
	idsOf := map[msgKey]map[string]bool{}
	applied := map[string]bool{}
	for p, d := range got {
		st.requests++
		k := keyOf[d.Body.Key]
		if d.Refused {
			st.refused++
		}
		row, committed := rows[d.Body.Key]
		if k.Job == "" || !committed || row.N == 0 || d.Body.Nonce != row.Nonce || d.Body.Doomed {
			vs = append(vs, violation{k, "rolled-back-delivered", fmt.Sprintf("delivery %d of %s (nonce %s, doomed=%v); the row: %+v", p, d.ID, d.Body.Nonce, d.Body.Doomed, row)})
			continue
		}
		mk := msgKey{d.Body.Key, d.Body.I}
		if idsOf[mk] == nil {
			idsOf[mk] = map[string]bool{}
		}
		idsOf[mk][d.ID] = true
		if _, ok := inStore[d.ID]; !ok {
			vs = append(vs, violation{k, "unknown-id", fmt.Sprintf("delivery %d has id %s, not in the outbox", p, d.ID)})
		}
		// Order: every earlier message of its topic was accepted before.
		if d.Topic != inStore[d.ID].Topic {
			vs = append(vs, violation{k, "wrong-topic", fmt.Sprintf("delivery %d of %s on topic %q, stored on %q", p, d.ID, d.Topic, inStore[d.ID].Topic)})
		}
		for _, earlier := range order[d.Topic] {
			if earlier == d.ID {
				break
			}
			if at, ok := firstAt[earlier]; !ok || at > p {
				vs = append(vs, violation{k, "out-of-order", fmt.Sprintf("delivery %d of %s (topic %s) before any delivery of the earlier %s", p, d.ID, d.Topic, earlier)})
				break
			}
		}
		if d.Refused {
			continue
		}
		if _, ok := firstAt[d.ID]; ok {
			st.redelivered++
		} else {
			firstAt[d.ID] = p
		}
		if !applied[d.ID] { // the receiver dedupes by id
			applied[d.ID] = true
			st.applied++
		}
	}
	for mk, ids := range idsOf {
		if len(ids) > 1 {
			var l []string
			for id := range ids {
				l = append(l, id)
			}
			sort.Strings(l)
			vs = append(vs, violation{keyOf[mk.key], "unstable-id", fmt.Sprintf("message %d delivered under %d ids: %s", mk.i, len(ids), strings.Join(l, ", "))})
		}
	}
	return firstAt, vs
}
