//go:build unix

package rabbitoutbox_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemstore"
	"github.com/idemgo/idem/idemtest"
	"github.com/idemgo/idem/internal/testwait"
	"github.com/idemgo/idem/outbox"
	"github.com/idemgo/idem/rabbitoutbox"
	amqp "github.com/rabbitmq/amqp091-go"
)

// killLease is the lease of the relays of TestRelayKilledWhilePublishing:
// a killed relay's messages go to the next one after it.
const killLease = 3 * time.Second

// killBackoff retries a failed publish (the broker restarting) soon, and
// never parks.
var killBackoff = idem.Capped(200*time.Millisecond, idem.Exponential(20*time.Millisecond))

// TestRelayKilledWhilePublishing: relays (this test binary, re-executed)
// publish 120 messages of 4 topics from a SQLite ledger to RabbitMQ and are
// SIGKILLed, one after the other, each at the moment the consumer gets a
// message (the relay is then waiting for a confirm, marking a message
// delivered, or publishing the next one), alternately with one and four
// deliveries in flight; during the third relay the broker itself is
// SIGKILLed and restarted (scripts/rabbitmq.sh crash, on a broker of the
// test's own). A last relay in the test's process finishes. The consumer
// (manual acks, reconnecting) must then have every message (0 lost) with
// its payload, every topic's first arrivals in the order the messages were
// put (0 order violations), and the ledger must mark each delivered.
// Duplicates are allowed (at least once): the test logs how many there were.
func TestRelayKilledWhilePublishing(t *testing.T) {
	if idemtest.IsChild(t) {
		idemtest.Start(t, "", killRelayChild) // does not return
	}
	url, crash := killBroker(t)
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(uint64(seed), 0))

	a := newAdmin(t, url)
	const nTopics, per = 4, 30
	var topics []string
	for i := range nTopics {
		tp := unique(fmt.Sprintf("kill-t%d", i))
		a.queue(tp)
		topics = append(topics, tp)
	}
	path := filepath.Join(t.TempDir(), "ledger.db")
	l, err := idem.OpenLedger(path)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	payload := map[string]string{}
	order := map[string][]string{} // per topic, the ids as put
	for i := range per {
		var msgs []outbox.Message
		for j := range nTopics {
			tp := topics[(i+j)%nTopics] // a transaction's topics in another order each time
			msgs = append(msgs, msg(tp, fmt.Sprintf("%s #%d", tp, i)))
		}
		for j, id := range put(t, l, day(1)+"/"+strconv.Itoa(i), msgs...) {
			payload[id] = string(msgs[j].Payload)
			order[msgs[j].Topic] = append(order[msgs[j].Topic], id)
		}
	}
	total := len(payload)

	c := startConsumer(t, url, topics)
	var kills int
	crashed := false
	for round := 0; round < 8 && c.distinct() < total; round++ {
		conc := []int{1, 4}[round%2]
		target := min(c.distinct()+3+rng.IntN(12), total)
		crashAt := 0
		if round == 2 && crash != nil {
			crashAt = min(c.distinct()+2, total)
			target = min(crashAt+8+rng.IntN(8), total) // past what arrives before the pause
		}
		var child *idemtest.Child
		armed := make(chan struct{})
		killed := make(chan struct{})
		c.killAt(target, func() {
			<-armed
			child.Kill() // as the consumer gets the message: mid-delivery
			close(killed)
		})
		child = idemtest.Start(t, fmt.Sprintf("%d|%s|%s", conc, url, path), nil)
		close(armed)
		if crashAt > 0 {
			testwait.Until(t, func() bool { return c.distinct() >= crashAt },
				"the consumer to get message %d from relay %d before the broker's restart", crashAt, round+1)
			// The consumer stops reading, so that the broker holds confirmed
			// messages when it dies: they must survive its restart.
			c.pause()
			held := delivered(t, l) + 5
			testwait.Until(t, func() bool { return delivered(t, l) >= min(held, total) },
				"relay %d to publish 5 more messages into the queues while the consumer is paused", round+1)
			crash() // the relay goes on: its publishes fail until the broker is back
			crashed = true
			c.resume()
		}
		select {
		case <-killed:
		case <-time.After(testwait.Limit(t)):
			c.mu.Lock()
			got := c.distinctLocked()
			c.mu.Unlock()
			child.Kill()
			t.Fatalf("relay %d: gave up after %s waiting for the consumer's %d-th message (it has %d); the relay's output:\n%s",
				round+1, testwait.Limit(t), target, got, child.Wait().Output)
		}
		if e := child.Wait(); !e.Killed {
			t.Fatalf("relay %d (concurrency %d): %+v, want killed", round+1, conc, e)
		}
		kills++
		t.Logf("relay %d (concurrency %d) killed as message %d of %d arrived", round+1, conc, target, total)
	}
	if crash != nil && !crashed {
		t.Fatalf("the broker was never restarted (every message arrived before the third relay)")
	}

	// The last relay, past the dead one's leases, until everything arrived
	// and is marked delivered.
	p := newPublisher(t, url)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = outbox.Relay(ctx, l, p, outbox.WithLease(killLease), outbox.WithPoll(5*time.Millisecond), outbox.WithBackoff(killBackoff),
			outbox.WithBatch(8), outbox.WithConcurrency(2))
	}()
	testwait.Until(t, func() bool { return delivered(t, l) == total }, "every message to be marked delivered")
	// What the broker confirmed reaches the consumer soon; what it lost
	// never does: the check below names it.
	for end := time.Now().Add(30 * time.Second); c.distinct() < total && time.Now().Before(end); {
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	testwait.Recv(t, done, "the last relay to stop")
	c.stop()

	c.mu.Lock()
	defer c.mu.Unlock()
	count := map[string]int{}
	first := map[string][]string{}
	for _, g := range c.got {
		if want, ok := payload[g.id]; !ok || g.body != want || g.topic != g.queue {
			t.Errorf("arrival %+v: stored payload %q (known: %v)", g, want, ok)
		}
		if count[g.id] == 0 {
			first[g.queue] = append(first[g.queue], g.id)
		}
		count[g.id]++
	}
	lost, violations := 0, 0
	for _, tp := range topics {
		for _, id := range order[tp] {
			if count[id] == 0 {
				lost++
				t.Errorf("message %s (%s) never arrived, and the ledger marks it delivered", id, payload[id])
			}
		}
	}
	for _, tp := range topics {
		if lost == 0 && !slices.Equal(first[tp], order[tp]) {
			violations++
			t.Errorf("topic %s: first arrivals %v, put %v", tp, first[tp], order[tp])
		}
	}
	dups := len(c.got) - len(count)
	t.Logf("%d messages, %d arrivals: %d lost, %d topics out of order, %d duplicates; %d arrivals flagged redelivered by the broker (handed to a consumer before, maybe never read); %d relays killed, broker restarted: %v",
		total, len(c.got), lost, violations, dups, c.redelivered, kills, crashed)
	if lost > 0 {
		t.Errorf("%d messages lost", lost)
	}
}

// delivered counts the messages l marks delivered.
func delivered(t *testing.T, l *idem.Ledger) int {
	recs, err := l.ListOutbox(context.Background(), idemstore.OutboxFilter{Status: idemstore.OutboxDelivered})
	if err != nil {
		t.Errorf("ListOutbox: %v", err)
	}
	return len(recs)
}

// killRelayChild is a relay until it is killed. Its arg is the concurrency,
// the broker's URL and the ledger's path.
func killRelayChild(arg string) {
	f := strings.SplitN(arg, "|", 3)
	conc, err := strconv.Atoi(f[0])
	if err != nil || len(f) != 3 {
		fmt.Println("arg:", arg, err)
		os.Exit(2)
	}
	l, err := idem.OpenLedger(f[2])
	if err != nil {
		fmt.Println("open:", err)
		os.Exit(2)
	}
	p, err := rabbitoutbox.New(f[1])
	if err != nil {
		fmt.Println("publisher:", err)
		os.Exit(2)
	}
	err = outbox.Relay(context.Background(), l, p, outbox.WithLease(killLease), outbox.WithPoll(5*time.Millisecond),
		outbox.WithBackoff(killBackoff), outbox.WithBatch(2*conc), outbox.WithConcurrency(conc))
	fmt.Println("relay returned:", err)
	os.Exit(3)
}

// killBroker returns the URL of a broker for the kill test and a function
// that SIGKILLs and restarts it: one of the test's own (scripts/rabbitmq.sh,
// stopped when the test ends) where rabbitmq-server is installed, else the
// shared test broker, which it does not restart (crash is nil).
func killBroker(t *testing.T) (url string, crash func()) {
	t.Helper()
	if _, err := os.Stat("/usr/lib/rabbitmq/bin/rabbitmq-server"); err != nil {
		if _, err := exec.LookPath("rabbitmq-server"); err != nil {
			url := testURL(t)
			t.Logf("no rabbitmq-server here to start a broker of the test's own: the shared test broker is not restarted")
			return url, nil
		}
	}
	script, err := filepath.Abs(filepath.Join("..", "scripts", "rabbitmq.sh"))
	if err != nil {
		t.Fatal(err)
	}
	env := append(os.Environ(), "TMPDIR="+t.TempDir())
	run := func(args ...string) (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), testwait.Limit(t))
		defer cancel()
		cmd := exec.CommandContext(ctx, "bash", append([]string{script}, args...)...)
		cmd.Env = env
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		t.Logf("scripts/rabbitmq.sh %s:\n%s", args[0], strings.TrimSpace(stderr.String()))
		return string(out), err
	}
	out, err := run("start")
	if err != nil {
		t.Fatalf("start a broker for the test (scripts/rabbitmq.sh start): %v", err)
	}
	url = strings.TrimSuffix(strings.TrimPrefix(strings.TrimSpace(out), "export IDEM_TEST_AMQP_URL='"), "'")
	if !strings.HasPrefix(url, "amqp://") {
		t.Fatalf("scripts/rabbitmq.sh start printed %q", out)
	}
	t.Cleanup(func() {
		if _, err := run("stop", url); err != nil {
			t.Errorf("stop the test's broker: %v", err)
		}
	})
	return url, func() {
		if _, err := run("crash", url); err != nil {
			t.Fatalf("restart the broker (scripts/rabbitmq.sh crash): %v", err)
		}
	}
}

// arrival is a message the consumer got.
type arrival struct {
	queue, topic, id, body string
}

// consumer reads the queues of a test with manual acks, recording each
// message before its ack, and reconnects when the broker goes away.
type consumer struct {
	mu          sync.Mutex
	got         []arrival
	seen        map[string]bool
	redelivered int
	at          int    // killAt's count
	onAt        func() // killAt's function
	quit        chan struct{}
	quitOnce    sync.Once
	wg          sync.WaitGroup
	run         chan struct{} // closed while the consumer reads (pause, resume)
	halt        chan struct{} // closed to end the sessions (pause)
	active      int           // the sessions open
}

// pause closes the consumer's sessions (what they had not acked goes back
// to the queues) and holds off new ones until resume.
func (c *consumer) pause() {
	c.mu.Lock()
	close(c.halt)
	c.run = make(chan struct{})
	c.mu.Unlock()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(time.Millisecond) {
		c.mu.Lock()
		n := c.active
		c.mu.Unlock()
		if n == 0 {
			return
		}
		if time.Now().After(deadline) {
			panic(fmt.Sprintf("the consumer's %d sessions did not close within a minute of the pause", n))
		}
	}
}

func (c *consumer) resume() {
	c.mu.Lock()
	c.halt = make(chan struct{})
	close(c.run)
	c.mu.Unlock()
}

func startConsumer(t *testing.T, url string, queues []string) *consumer {
	c := &consumer{seen: map[string]bool{}, quit: make(chan struct{}), run: make(chan struct{}), halt: make(chan struct{})}
	close(c.run)
	for _, q := range queues {
		c.wg.Go(func() { c.consume(url, q) })
	}
	t.Cleanup(c.stop)
	return c
}

func (c *consumer) stop() {
	c.quitOnce.Do(func() { close(c.quit) })
	c.wg.Wait()
}

// killAt calls f (on the consumer's goroutine) when the n-th distinct
// message arrives.
func (c *consumer) killAt(n int, f func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.at, c.onAt = n, f
}

func (c *consumer) distinct() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.distinctLocked()
}

func (c *consumer) distinctLocked() int { return len(c.seen) }

func (c *consumer) consume(url, queue string) {
	for {
		c.mu.Lock()
		run := c.run
		c.mu.Unlock()
		select {
		case <-c.quit:
			return
		case <-run:
		}
		c.session(url, queue)
		select {
		case <-c.quit:
			return
		case <-time.After(100 * time.Millisecond): // the broker is restarting
		}
	}
}

// session consumes queue on one connection until it is lost or the
// consumer stops.
func (c *consumer) session(url, queue string) {
	c.mu.Lock()
	halt := c.halt
	c.active++
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		c.active--
		c.mu.Unlock()
	}()
	select {
	case <-halt:
		return
	default:
	}
	conn, err := amqp.Dial(url)
	if err != nil {
		return
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return
	}
	if err := ch.Qos(10, 0, false); err != nil {
		return
	}
	ds, err := ch.Consume(queue, "", false, false, false, false, nil)
	if err != nil {
		return
	}
	for {
		select {
		case <-c.quit:
			return
		case <-halt:
			return
		case d, ok := <-ds:
			if !ok {
				return
			}
			select {
			case <-halt: // paused: d goes back to its queue unacked
				return
			default:
			}
			topic, _ := d.Headers["idem-topic"].(string)
			var f func()
			c.mu.Lock()
			c.got = append(c.got, arrival{queue: queue, topic: topic, id: d.MessageId, body: string(d.Body)})
			if d.Redelivered {
				c.redelivered++
			}
			if !c.seen[d.MessageId] {
				c.seen[d.MessageId] = true
				if len(c.seen) >= c.at && c.onAt != nil {
					f, c.onAt = c.onAt, nil
				}
			}
			c.mu.Unlock()
			if f != nil {
				f()
			}
			_ = d.Ack(false) // lost with the connection: the broker delivers it again
		}
	}
}
