package natsoutbox_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/internal/testwait"
	"github.com/idemgo/idem/natsoutbox"
	"github.com/idemgo/idem/outbox"
)

// TestRelayToJetStream relays 12 messages of 3 topics through a real
// nats-server: each is stored once, on its subject, with Nats-Msg-Id its
// id and its headers, each topic in the order stored; concurrently too.
func TestRelayToJetStream(t *testing.T) {
	url := testURL(t)
	for _, conc := range []int{1, 4} {
		t.Run(map[int]string{1: "one_at_a_time", 4: "concurrency4"}[conc], func(t *testing.T) {
			t.Parallel()
			js := jsOf(t, url)
			prefix := unique("idemtest.") + "."
			stream := newStream(t, js, prefix, 2*time.Minute)
			l := openLedger(t, t.TempDir())
			ids := putMessages(t, l, "notify", 3, 4)
			d, err := natsoutbox.FromURL(url + "/?stream=" + stream + "&subject_prefix=" + prefix)
			if err != nil {
				t.Fatal(err)
			}
			defer d.Close()
			res, err := outbox.RelayOnce(context.Background(), l, d, outbox.WithConcurrency(conc))
			if err != nil || res.Delivered != 12 {
				t.Fatalf("relay: %+v, %v; want 12 delivered", res, err)
			}
			got := readStream(t, js, stream)
			checkStream(t, got, ids, true)
			for _, m := range got {
				if m.sub != prefix+m.topic || m.attempt != "1" || m.headers.Get("Content-Type") != "text/plain" ||
					!strings.HasSuffix(m.body, " "+m.topic) {
					t.Fatalf("message %s: subject %s, attempt %s, headers %v, body %q", m.id, m.sub, m.attempt, m.headers, m.body)
				}
			}
		})
	}
}

// checkStream checks the stream's messages against the ids put, by
// topic: none lost, each topic's first copies in the order put, and, with
// once, no id twice.
func checkStream(t *testing.T, got []stored, ids map[string][]string, once bool) {
	t.Helper()
	count := map[string]int{}
	first := map[string][]string{}
	for _, m := range got {
		count[m.id]++
		if count[m.id] == 1 {
			first[m.topic] = append(first[m.topic], m.id)
		}
	}
	for topic, want := range ids {
		for _, id := range want {
			switch {
			case count[id] == 0:
				t.Errorf("message %s (topic %s) lost: not in the stream", id, topic)
			case once && count[id] > 1:
				t.Errorf("message %s (topic %s) stored %d times, want once", id, topic, count[id])
			}
		}
		if !slices.Equal(first[topic], want) {
			t.Errorf("topic %s: the stream has %v, want the order %v", topic, first[topic], want)
		}
	}
}

// TestResendIsDropped: a message published again with the same id within
// the duplicate window (what a restarted relay does) is a delivery, and
// the stream keeps one copy.
func TestResendIsDropped(t *testing.T) {
	url := testURL(t)
	js := jsOf(t, url)
	prefix := unique("idemtest.") + "."
	stream := newStream(t, js, prefix, time.Minute)
	d, err := natsoutbox.FromURL(url + "/?subject_prefix=" + prefix)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	ctx := context.Background()
	dl := outbox.Delivery{ID: "req-1-0", Topic: "orders", Payload: []byte("x"), Attempt: 1}
	for attempt := 1; attempt <= 3; attempt++ {
		dl.Attempt = attempt
		if err := d.Deliver(ctx, dl); err != nil {
			t.Fatalf("attempt %d: %v", attempt, err)
		}
	}
	got := readStream(t, js, stream)
	if len(got) != 1 || got[0].id != "req-1-0" || got[0].attempt != "1" {
		t.Fatalf("the stream has %+v; want the first attempt alone", got)
	}
}

// TestDeliverFailures: a topic that makes no valid subject parks at once
// (Permanent); a subject no stream takes, or another stream than the one
// expected, fails the attempt (retried: the operator may add the stream).
func TestDeliverFailures(t *testing.T) {
	url := testURL(t)
	js := jsOf(t, url)
	prefix := unique("idemtest.") + "."
	newStream(t, js, prefix, time.Minute)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	d, err := natsoutbox.FromURL(url + "/?subject_prefix=" + prefix)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	for _, topic := range []string{"a b", "a..b", "*", "a.>", ".a", "a."} {
		err := d.Deliver(ctx, outbox.Delivery{ID: "x-0", Topic: topic})
		if err == nil || !idem.IsPermanent(err) {
			t.Errorf("topic %q: %v; want a permanent failure", topic, err)
		}
	}
	other, err := natsoutbox.FromURL(url + "/?subject_prefix=" + unique("nostream.") + ".")
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if err := other.Deliver(ctx, outbox.Delivery{ID: "x-1", Topic: "t"}); err == nil || idem.IsPermanent(err) {
		t.Errorf("a subject no stream takes: %v; want a failed attempt, not permanent", err)
	}
	wrong, err := natsoutbox.FromURL(url + "/?stream=NOSUCHSTREAM&subject_prefix=" + prefix)
	if err != nil {
		t.Fatal(err)
	}
	defer wrong.Close()
	if err := wrong.Deliver(ctx, outbox.Delivery{ID: "x-2", Topic: "t"}); err == nil || idem.IsPermanent(err) {
		t.Errorf("another stream than expected: %v; want a failed attempt, not permanent", err)
	}
}

func TestFromURLErrors(t *testing.T) {
	for _, u := range []string{"http://127.0.0.1:4222", "nats://", "nats://127.0.0.1:4222/path", "nats://127.0.0.1:4222/?strem=S", "%%"} {
		if _, err := natsoutbox.FromURL(u); err == nil {
			t.Errorf("FromURL(%q): no error", u)
		}
	}
	// No server there: the first connection fails.
	if _, err := natsoutbox.FromURL("nats://127.0.0.1:1/"); err == nil {
		t.Error("FromURL of a port with no server: no error")
	}
	// The password is not in the message.
	_, err := natsoutbox.FromURL("nats://u:secret@127.0.0.1:1/?x=1")
	if err == nil || strings.Contains(err.Error(), "secret") {
		t.Errorf("error %v shows the password", err)
	}
}

// TestResendAfterWindowIsStored shows what is NOT promised: a copy
// published again after the stream's duplicate window (here 1 s) is
// stored a second time, so a consumer that must not apply a message twice
// dedupes by Nats-Msg-Id too.
func TestResendAfterWindowIsStored(t *testing.T) {
	url := testURL(t)
	js := jsOf(t, url)
	prefix := unique("idemtest.") + "."
	stream := newStream(t, js, prefix, time.Second)
	d, err := natsoutbox.FromURL(url + "/?subject_prefix=" + prefix)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	ctx := context.Background()
	dl := outbox.Delivery{ID: "req-2-0", Topic: "orders", Payload: []byte("x"), Attempt: 1}
	if err := d.Deliver(ctx, dl); err != nil {
		t.Fatal(err)
	}
	s, err := js.Stream(ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	testwait.Until(t, func() bool {
		dl.Attempt++
		if err := d.Deliver(ctx, dl); err != nil {
			t.Fatal(err)
		}
		info, err := s.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if info.State.Msgs == 1 {
			time.Sleep(100 * time.Millisecond)
		}
		return info.State.Msgs == 2
	}, "a re-send after the 1 s duplicate window to be stored again")
	got := readStream(t, js, stream)
	if len(got) != 2 || got[0].id != got[1].id {
		t.Fatalf("the stream has %+v; want the message twice, with one Nats-Msg-Id", got)
	}
}
