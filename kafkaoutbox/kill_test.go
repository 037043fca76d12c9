package kafkaoutbox_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemstore"
	"github.com/idemgo/idem/idemtest"
	"github.com/idemgo/idem/internal/testwait"
	"github.com/idemgo/idem/kafkaoutbox"
	"github.com/idemgo/idem/outbox"
)

// TestRelayKilledMidProduce: a relay process (outbox.Relay with the Kafka
// deliverer, on the SQLite ledger) SIGKILLs itself right after the broker
// acknowledged its 1st, 5th or 12th record of 12 messages on 3 topics,
// before the ledger marks it delivered (with outbox.WithConcurrency(4),
// other records may be in flight as it dies). A relay restarted past the
// dead one's leases produces the interrupted message again: at least once,
// so the consumer gets it twice with the same Idem-Message-Id; nothing is
// lost, each topic's first arrivals are in the order stored, and all are
// marked delivered. Between the two relays the broker is SIGKILLed and
// started again on the same ports and data directory: every record it
// acknowledged before must be there after it (the restarted relay never
// produces a message the ledger marked delivered, so a lost record is a
// lost message).
//
// The broker is the test's own kfake (scripts/kafka.sh start, crash and
// stop; a Kafka-protocol broker, not Apache Kafka) with a data directory:
// kfake writes each produced batch to its partition's segment file
// before it acknowledges it (without fsync: the page cache survives a
// process's SIGKILL, not a machine's crash), and, started again on the
// directory, replays the segments. It is one process for its three
// brokers: the whole cluster dies at once, not one broker of several.
func TestRelayKilledMidProduce(t *testing.T) {
	for _, conc := range []int{1, 4} {
		for _, killAt := range []int{1, 5, 12} {
			name := fmt.Sprintf("record%d", killAt)
			if conc > 1 {
				name += fmt.Sprintf("_concurrency%d", conc)
			}
			t.Run(name, func(t *testing.T) {
				if idemtest.IsChild(t) {
					idemtest.Start(t, "", killChild) // does not return
				}
				t.Parallel()
				testRelayKilled(t, killAt, conc)
			})
		}
	}
}

// killChild is the relay of TestRelayKilledMidProduce: its arg is
// "conc|killAt|url|ledger directory".
func killChild(arg string) {
	parts := strings.SplitN(arg, "|", 4)
	conc, _ := strconv.Atoi(parts[0])
	killAt, _ := strconv.Atoi(parts[1])
	l, err := idem.OpenLedger(parts[3] + "/ledger.db")
	if err != nil {
		fmt.Println("open:", err)
		os.Exit(2)
	}
	d, err := kafkaoutbox.FromURL(parts[2])
	if err != nil {
		fmt.Println("kafka:", err)
		os.Exit(2)
	}
	var acked atomic.Int32
	kill := outbox.DeliverFunc(func(ctx context.Context, dl outbox.Delivery) error {
		if err := d.Deliver(ctx, dl); err != nil {
			return err
		}
		if int(acked.Add(1)) == killAt {
			idemtest.Kill() // acknowledged by the broker, not marked in the ledger
		}
		return nil
	})
	err = outbox.Relay(context.Background(), l, kill, outbox.WithPoll(5*time.Millisecond), outbox.WithBatch(2*conc),
		outbox.WithConcurrency(conc))
	fmt.Println("relay returned:", err)
	os.Exit(3)
}

func testRelayKilled(t *testing.T, killAt, conc int) {
	addr, crash := killBroker(t)
	prefix := unique("idemtest.") + "."
	ktopics := topicNames(prefix, 3)
	createTopics(t, addr, ktopics...)
	dir := t.TempDir()
	l := openLedger(t, dir)
	ids := putMessages(t, l, "notify", 3, 4)
	url := "kafka://" + addr + "/?topic_prefix=" + prefix

	child := idemtest.Start(t, fmt.Sprintf("%d|%d|%s|%s", conc, killAt, url, dir), nil)
	if e := child.Wait(); !e.Killed {
		t.Fatalf("relay child did not die of SIGKILL: %+v", e)
	}
	before := readTopics(t, addr, killAt, ktopics...)
	inKafka := map[string]bool{}
	for _, r := range before {
		inKafka[r.id] = true
	}
	crash()
	after := readTopics(t, addr, len(before), ktopics...)
	for _, id := range lost(before, after) {
		t.Errorf("message %s: acknowledged by the broker before its restart, not in Kafka after it", id)
	}

	// The restart: a relay past the dead relay's leases (on its own clock).
	var (
		mu     sync.Mutex
		resent = map[string]bool{}
	)
	d, err := kafkaoutbox.FromURL(url)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	ctx, cancel := context.WithTimeout(context.Background(), testwait.Limit(t))
	defer cancel()
	res, err := outbox.RelayOnce(ctx, l, d, outbox.WithClock(idemtest.NewClock(time.Now().Add(2*outbox.DefaultLease))),
		outbox.OnDelivery(func(r outbox.DeliveryResult) {
			mu.Lock()
			defer mu.Unlock()
			if r.Outcome == outbox.DeliverySent && inKafka[r.ID] {
				resent[r.ID] = true // produced before the kill, and again now
			}
		}))
	if err != nil {
		t.Fatalf("relay after the restart: %v (%+v)", err, res)
	}
	if len(resent) == 0 {
		t.Fatalf("the restarted relay produced none of the %d messages Kafka had again: the kill hit no unmarked record", len(before))
	}

	got := readTopics(t, addr, 12+len(resent), ktopics...)
	checkRecords(t, got, ids, false)
	count := map[string]int{}
	for _, r := range got {
		count[r.id]++
	}
	for id := range resent {
		if count[id] < 2 {
			t.Errorf("message %s was produced again after the restart but arrived %d times", id, count[id])
		}
	}
	st, err := idemstore.Of(l)
	if err != nil {
		t.Fatal(err)
	}
	recs, err := st.(idemstore.OutboxStore).ListOutbox(ctx, idemstore.OutboxFilter{})
	if err != nil || len(recs) != 12 {
		t.Fatalf("%d messages in the outbox, %v; want 12", len(recs), err)
	}
	for _, r := range recs {
		if r.Status != idemstore.OutboxDelivered {
			t.Errorf("message %s: %s, want delivered", r.ID, r.Status)
		}
	}
}

// lost are the ids of records in before and not in after.
func lost(before, after []received) []string {
	in := map[string]bool{}
	for _, r := range after {
		in[r.id] = true
	}
	var out []string
	for _, r := range before {
		if !in[r.id] {
			out = append(out, r.id)
		}
	}
	return out
}

// killBroker starts a kfake broker of the test's own (scripts/kafka.sh,
// in a temporary directory, stopped when the test ends) and returns its
// addresses and a function that SIGKILLs it and starts it again on the
// same ports and data directory (scripts/kafka.sh crash). Without go on
// PATH (kafka.sh builds kfakeserver), or if the broker cannot start, the
// test is skipped, except in CI.
func killBroker(t *testing.T) (addr string, crash func()) {
	t.Helper()
	if _, err := exec.LookPath("go"); err != nil {
		if inCI() {
			t.Fatalf("no go on PATH to build kfakeserver, and CI must run the Kafka tests")
		}
		t.Skip("no go on PATH to build kfakeserver (scripts/kafka.sh)")
	}
	script, err := filepath.Abs(filepath.Join("..", "scripts", "kafka.sh"))
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
		if msg := strings.TrimSpace(stderr.String()); msg != "" || err != nil {
			t.Logf("scripts/kafka.sh %s: %v\n%s", args[0], err, msg)
		}
		return string(out), err
	}
	out, err := run("start")
	if err != nil {
		if !inCI() {
			t.Skipf("could not start a broker for the test (scripts/kafka.sh start): %v", err)
		}
		t.Fatalf("start a broker for the test (scripts/kafka.sh start): %v", err)
	}
	addr = strings.TrimSuffix(strings.TrimPrefix(strings.TrimSpace(out), "export "+addrEnv+"='"), "'")
	if !strings.HasPrefix(addr, "127.0.0.1:") {
		t.Fatalf("scripts/kafka.sh start printed %q", out)
	}
	t.Cleanup(func() {
		if _, err := run("stop", addr); err != nil {
			t.Errorf("stop the test's broker: %v", err)
		}
	})
	return addr, func() {
		t.Helper()
		if _, err := run("crash", addr); err != nil {
			t.Fatalf("restart the broker (scripts/kafka.sh crash): %v", err)
		}
	}
}
