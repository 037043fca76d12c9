package natsoutbox_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/internal/testwait"
	"github.com/idemgo/idem/outbox"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

const urlEnv = "IDEM_TEST_NATS_URL"

func inCI() bool {
	v := os.Getenv("CI")
	return v != "" && v != "false" && v != "0"
}

// testURL returns the URL of the test server (scripts/nats.sh). Without
// one the test is skipped, except in CI, where the NATS tests must run.
func testURL(t testing.TB) string {
	t.Helper()
	u := os.Getenv(urlEnv)
	if u == "" {
		if inCI() {
			t.Fatalf("%s is not set, and CI must run the NATS tests: run scripts/test.sh (it starts nats-server with scripts/nats.sh)", urlEnv)
		}
		t.Skipf("no NATS server: run scripts/test.sh (it starts a throwaway one), or set %s=nats://host:port", urlEnv)
	}
	return u
}

// unique is a name no other test (or run) uses: a stream's, a subject
// prefix's.
func unique(prefix string) string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return prefix + strings.ToUpper(hex.EncodeToString(b))
}

// jsOf connects to url for the test's own use (streams, reading them).
func jsOf(t testing.TB, url string) jetstream.JetStream {
	t.Helper()
	nc, err := nats.Connect(url, nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	if err != nil {
		t.Fatalf("connect to %s: %v", url, err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// newStream creates a file-stored stream that takes the subjects
// prefix.>, with a duplicate window of dup, and deletes it when t ends.
func newStream(t testing.TB, js jetstream.JetStream, prefix string, dup time.Duration) string {
	t.Helper()
	name := unique("IDEMTEST_")
	ctx := context.Background()
	_, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{prefix + ">"},
		Storage: jetstream.FileStorage, Duplicates: dup})
	if err != nil {
		t.Fatalf("create stream %s: %v", name, err)
	}
	t.Cleanup(func() { _ = js.DeleteStream(context.Background(), name) })
	return name
}

// stored is a message as the stream keeps it.
type stored struct {
	seq            uint64
	id, topic, sub string
	attempt        string
	body           string
	headers        nats.Header
}

// readStream returns every message of stream, in the stream's order, as
// a consumer gets them (an ordered consumer from the start).
func readStream(t testing.TB, js jetstream.JetStream, stream string) []stored {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testwait.Limit(t))
	defer cancel()
	s, err := js.Stream(ctx, stream)
	if err != nil {
		t.Fatalf("stream %s: %v", stream, err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatalf("stream %s: %v", stream, err)
	}
	cons, err := s.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatalf("consumer of %s: %v", stream, err)
	}
	var out []stored
	for uint64(len(out)) < info.State.Msgs {
		batch, err := cons.Fetch(int(info.State.Msgs)-len(out), jetstream.FetchMaxWait(time.Second))
		if err != nil {
			t.Fatalf("fetch from %s: %v", stream, err)
		}
		for m := range batch.Messages() {
			meta, err := m.Metadata()
			if err != nil {
				t.Fatal(err)
			}
			h := m.Headers()
			out = append(out, stored{seq: meta.Sequence.Stream, id: h.Get(jetstream.MsgIDHeader), topic: h.Get("Idem-Topic"),
				sub: m.Subject(), attempt: h.Get("Idem-Attempt"), body: string(m.Data()), headers: h})
		}
		if err := batch.Error(); err != nil {
			t.Fatalf("fetch from %s: %v", stream, err)
		}
		if ctx.Err() != nil {
			t.Fatalf("gave up after %s reading %d messages of %s: got %d", testwait.Limit(t), info.State.Msgs, stream, len(out))
		}
	}
	return out
}

// putMessages queues per messages on each of topics topics (t0, t1, ...)
// in s, one transaction per round, and returns their ids by topic in the
// order stored.
func putMessages(t testing.TB, s *idem.Ledger, job string, topics, per int) map[string][]string {
	t.Helper()
	ids := map[string][]string{}
	for i := range per {
		key := idem.Key{Job: job, Period: fmt.Sprintf("2026-11-%02d", i+1)}
		err := s.RunTx(context.Background(), key, func(ctx context.Context, tx *sql.Tx) error {
			for tp := range topics {
				topic := fmt.Sprintf("t%d", tp)
				id, err := outbox.Put(ctx, tx, outbox.Message{Topic: topic, Payload: []byte(key.Period + " " + topic),
					Headers: map[string]string{"Content-Type": "text/plain"}})
				if err != nil {
					return err
				}
				ids[topic] = append(ids[topic], id)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return ids
}

func openLedger(t testing.TB, dir string) *idem.Ledger {
	t.Helper()
	l, err := idem.OpenLedger(filepath.Join(dir, "ledger.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// server is a nats-server of the test's own (a kill test restarts it).
type server struct {
	t    testing.TB
	url  string
	port int
	dir  string
	cmd  *exec.Cmd
}

// ownServer starts a nats-server with JetStream on a free loopback port,
// its store in a temporary directory. Without nats-server on PATH the
// test is skipped, except in CI.
func ownServer(t testing.TB) *server {
	t.Helper()
	bin, err := exec.LookPath("nats-server")
	if err != nil {
		if bin, err = exec.LookPath("/usr/sbin/nats-server"); err != nil {
			if inCI() {
				t.Fatalf("nats-server is not installed, and CI must run the NATS tests (Debian: apt-get install nats-server)")
			}
			t.Skip("no nats-server on PATH (Debian: apt-get install nats-server)")
		}
	}
	port := stablePort(t)
	s := &server{t: t, url: "nats://127.0.0.1:" + strconv.Itoa(port), port: port, dir: t.TempDir()}
	s.start(bin)
	t.Cleanup(func() { s.kill() })
	return s
}

func (s *server) start(bin string) {
	s.t.Helper()
	s.cmd = exec.Command(bin, "-a", "127.0.0.1", "-p", strconv.Itoa(s.port), "-js", "-sd", filepath.Join(s.dir, "store"),
		"-l", filepath.Join(s.dir, "server.log"))
	if err := s.cmd.Start(); err != nil {
		s.t.Fatalf("start nats-server: %v", err)
	}
	testwait.Until(s.t, func() bool {
		nc, err := nats.Connect(s.url, nats.Timeout(200*time.Millisecond))
		if err != nil {
			return false
		}
		defer nc.Close()
		js, err := jetstream.New(nc)
		if err != nil {
			return false
		}
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		defer cancel()
		_, err = js.AccountInfo(ctx)
		return err == nil
	}, "nats-server on port %d to take JetStream requests (log: %s)", s.port, filepath.Join(s.dir, "server.log"))
}

// portsTaken holds the ports stablePort has returned in this process.
var portsTaken sync.Map

// stablePort returns a loopback port that scripts/lib/ports.sh's free_port
// picks (nothing listens on it, and it is below the kernel's ephemeral
// range: crash restarts the server on its port, and a port inside the
// range is free for any outgoing connection while the server is down) and
// that no other test of this process has had (a crashed server's port
// looks free for a while).
func stablePort(t testing.TB) int {
	t.Helper()
	for range 20 {
		out, err := exec.Command("bash", "-c", `. ../scripts/lib/ports.sh && free_port`).CombinedOutput()
		if err != nil {
			t.Fatalf("scripts/lib/ports.sh free_port: %v\n%s", err, out)
		}
		port, err := strconv.Atoi(strings.TrimSpace(string(out)))
		if err != nil {
			t.Fatalf("scripts/lib/ports.sh free_port printed %q", out)
		}
		if _, taken := portsTaken.LoadOrStore(port, true); !taken {
			return port
		}
	}
	t.Fatal("scripts/lib/ports.sh free_port: 20 ports in a row another test of this process had")
	return 0
}

// kill SIGKILLs the server and waits for it to exit.
func (s *server) kill() {
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
	s.cmd = nil
}

// crash SIGKILLs the server and starts it again on the same port and
// store: JetStream recovers its streams from the files.
func (s *server) crash() {
	s.t.Helper()
	bin := s.cmd.Path
	s.kill()
	s.start(bin)
}
