package redisstore_test

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemstore"
	"github.com/idemgo/idem/internal/testwait"
	"github.com/idemgo/idem/redisstore"
	"github.com/redis/go-redis/v9"
)

// TestFinishResentIsIdempotent: the same attempt's done mark sent twice
// (what go-redis does when the first reply is lost) succeeds both times
// and leaves one done mark; another attempt's end is still refused.
func TestFinishResentIsIdempotent(t *testing.T) {
	t.Parallel()
	c := newClient(t)
	s := openStore(t, c)
	ctx := context.Background()
	k := idem.Key{Job: "resent", Period: "2026-10-27"}
	cl, err := s.Claim(ctx, idemstore.ClaimRequest{Key: k, Owner: idemstore.Owner(), Now: time.Now(), Lease: time.Minute})
	if err != nil || cl.State != idemstore.ClaimAcquired {
		t.Fatalf("claim: %+v, %v", cl, err)
	}
	end := idemstore.End{Status: idemstore.StatusDone, Now: time.Now(), Value: []byte("v1"), Cursor: true}
	for i := 1; i <= 2; i++ {
		if err := s.Finish(ctx, k, cl.Attempt, end); err != nil {
			t.Fatalf("Finish #%d of attempt %d (the same done mark): %v; want nil", i, cl.Attempt, err)
		}
	}
	rec, ok, err := s.Lookup(ctx, k)
	if err != nil || !ok || rec.Status != idemstore.StatusDone || rec.Attempt != cl.Attempt || string(rec.Value) != "v1" {
		t.Fatalf("record after the re-sent done mark: %+v, %v, %v", rec, ok, err)
	}
	// Another attempt number, or another end by the same attempt, is refused.
	if err := s.Finish(ctx, k, cl.Attempt+1, end); !errors.Is(err, idem.ErrLeaseLost) {
		t.Fatalf("Finish by attempt %d, which never held the key: %v; want ErrLeaseLost", cl.Attempt+1, err)
	}
	failed := idemstore.End{Status: idemstore.StatusFailed, Now: time.Now(), Failures: 1, Error: "boom", NotBefore: time.Now().Add(time.Minute)}
	if err := s.Finish(ctx, k, cl.Attempt, failed); !errors.Is(err, idem.ErrLeaseLost) {
		t.Fatalf("a failed end by attempt %d after its done mark: %v; want ErrLeaseLost", cl.Attempt, err)
	}
	if rec, _, _ := s.Lookup(ctx, k); rec.Status != idemstore.StatusDone {
		t.Fatalf("record after the refused ends: %+v", rec)
	}

	// An end that another writer replaced is refused when re-sent: a
	// Resolve of it, or a later attempt.
	for _, replace := range []string{"resolve", "later attempt"} {
		k := idem.Key{Job: "resent", Period: "replaced by " + replace}
		cl, err := s.Claim(ctx, idemstore.ClaimRequest{Key: k, Owner: idemstore.Owner(), Now: time.Now(), Lease: time.Minute})
		if err != nil || cl.State != idemstore.ClaimAcquired {
			t.Fatalf("claim: %+v, %v", cl, err)
		}
		failed := idemstore.End{Status: idemstore.StatusFailed, Now: time.Now(), Failures: 1, Error: "boom", NotBefore: time.Now()}
		if err := s.Finish(ctx, k, cl.Attempt, failed); err != nil {
			t.Fatal(err)
		}
		if replace == "resolve" {
			err = s.Resolve(ctx, k, idemstore.ResolveRetry)
		} else {
			var next idemstore.Claim
			next, err = s.Claim(ctx, idemstore.ClaimRequest{Key: k, Owner: idemstore.Owner(), Now: time.Now(), Lease: time.Minute})
			if err == nil && next.State != idemstore.ClaimAcquired {
				t.Fatalf("the later attempt's claim: %+v", next)
			}
		}
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Finish(ctx, k, cl.Attempt, failed); !errors.Is(err, idem.ErrLeaseLost) {
			t.Fatalf("attempt %d's end re-sent after a %s: %v; want ErrLeaseLost", cl.Attempt, replace, err)
		}
	}
}

// replyDropper is a TCP proxy on loopback in front of a redis-server: once
// armed, it forwards the next command that contains match to the server,
// and when the server's reply arrives, closes the client's connection
// instead of passing the reply on: the command ran, its reply is lost.
type replyDropper struct {
	ln      net.Listener
	target  string
	mu      sync.Mutex
	match   [][]byte // armed when not nil: any of them
	dropped int
}

func newReplyDropper(t *testing.T, target string) *replyDropper {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &replyDropper{ln: ln, target: target}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go p.pipe(conn)
		}
	}()
	return p
}

func (p *replyDropper) arm(match ...[]byte) {
	p.mu.Lock()
	p.match = match
	p.mu.Unlock()
}

func (p *replyDropper) drops() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.dropped
}

func (p *replyDropper) pipe(client net.Conn) {
	server, err := net.Dial("tcp", p.target)
	if err != nil {
		_ = client.Close()
		return
	}
	var mu sync.Mutex
	dropNext := false
	go func() { // server to client
		defer client.Close()
		defer server.Close()
		buf := make([]byte, 64<<10)
		for {
			n, err := server.Read(buf)
			if n > 0 {
				mu.Lock()
				drop := dropNext
				mu.Unlock()
				if drop {
					p.mu.Lock()
					p.dropped++
					p.mu.Unlock()
					return
				}
				if _, err := client.Write(buf[:n]); err != nil {
					return
				}
			}
			if err != nil {
				return
			}
		}
	}()
	defer server.Close()
	var seen []byte
	buf := make([]byte, 64<<10)
	for {
		n, err := client.Read(buf)
		if n > 0 {
			seen = append(seen, buf[:n]...)
			p.mu.Lock()
			for _, m := range p.match {
				if bytes.Contains(seen, m) {
					p.match = nil
					mu.Lock()
					dropNext = true // set before the command reaches the server
					mu.Unlock()
					break
				}
			}
			if keep := 4096; len(seen) > keep {
				seen = append(seen[:0], seen[len(seen)-keep:]...)
			}
			p.mu.Unlock()
			if _, err := server.Write(buf[:n]); err != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// TestDoneMarkReplyLost: a Run whose done mark's reply is lost (a TCP
// proxy drops the connection after the server ran the Finish script, so
// go-redis sends it again on a new connection) returns nil, not
// ErrLeaseLost: this attempt's done mark stands. The key is done and fn
// does not run again.
func TestDoneMarkReplyLost(t *testing.T) {
	t.Parallel()
	direct := newClient(t)
	p := newReplyDropper(t, testAddr(t))
	c := redis.NewClient(&redis.Options{Addr: p.ln.Addr().String()}) // go-redis's default retries
	t.Cleanup(func() { _ = c.Close() })
	s := openStore(t, direct)
	s, err := redisstore.New(context.Background(), c, redisstore.WithPrefix(s.Prefix()))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	// A first Run loads the scripts into the server: the Finish that
	// follows is one EVALSHA, whose reply the proxy drops.
	if err := s.Run(ctx, idem.Key{Job: "lost", Period: "warm-up"}, func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
	k := idem.Key{Job: "lost", Period: "2026-10-27"}
	for _, mode := range []idem.Option{idem.AtMostOnce()} {
		ran := 0
		err := s.Run(ctx, k, func(context.Context) error {
			ran++
			p.arm(redisstore.FinishScriptMarks...)
			return nil
		}, mode)
		if err != nil {
			t.Fatalf("Run whose done mark's reply was lost: %v; want nil (proxy dropped %d replies)", err, p.drops())
		}
		if p.drops() != 1 {
			t.Fatalf("the proxy dropped %d replies, want 1: the test did not lose the done mark's reply", p.drops())
		}
		rec, ok, err := s.Lookup(ctx, k)
		if err != nil || !ok || rec.Status != idemstore.StatusDone {
			t.Fatalf("record: %+v, %v, %v; want done", rec, ok, err)
		}
		if err := s.Run(ctx, k, func(context.Context) error { ran++; return nil }, mode); err != nil || ran != 1 {
			t.Fatalf("second Run: %v, fn ran %d times; want nil and once", err, ran)
		}
	}
}

// TestAuthRequired: a server that requires a password is reported as an
// authentication error (ErrAuth, wrapping the server's NOAUTH or
// WRONGPASS), not as ErrWeakDurability with advice to pass
// AllowWeakDurability; with the password, the store opens.
func TestAuthRequired(t *testing.T) {
	t.Parallel()
	testAddr(t)
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatalf("redis-server not on PATH: %v", err)
	}
	dir := t.TempDir()
	sock := filepath.Join(dir, "redis.sock")
	log := filepath.Join(dir, "server.log")
	cmd := exec.Command(bin, "--port", "0", "--unixsocket", sock, "--unixsocketperm", "700", "--dir", dir,
		"--save", "", "--appendonly", "yes", "--appendfsync", "always", "--logfile", log, "--requirepass", "s3cret")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	ctx := context.Background()
	client := func(password string) *redis.Client {
		c := redis.NewClient(&redis.Options{Network: "unix", Addr: sock, Password: password, MaxRetries: -1})
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	good := client("s3cret")
	testwait.Until(t, func() bool { return good.Ping(ctx).Err() == nil }, "redis-server to answer on %s (its log: %s)", sock, log)
	for _, c := range []struct {
		name, password, reply string
	}{{"no password", "", "NOAUTH"}, {"wrong password", "wrong", "WRONGPASS"}} {
		for _, opts := range [][]redisstore.Option{nil, {redisstore.AllowWeakDurability()}} {
			_, err := redisstore.New(ctx, client(c.password), opts...)
			if !errors.Is(err, redisstore.ErrAuth) || errors.Is(err, redisstore.ErrWeakDurability) ||
				!strings.Contains(err.Error(), "authentication") || !strings.Contains(err.Error(), c.reply) ||
				strings.Contains(err.Error(), "AllowWeakDurability") {
				t.Errorf("New with %s (%d options): %v; want ErrAuth, naming authentication and the server's %s, not ErrWeakDurability",
					c.name, len(opts), err, c.reply)
			}
			var re redis.Error
			if !errors.As(err, &re) {
				t.Errorf("New with %s: %v does not wrap the server's error", c.name, err)
			}
		}
	}
	if n, err := good.DBSize(ctx).Result(); err != nil || n != 0 {
		t.Fatalf("keys after the refusals: %d, %v; want none", n, err)
	}
	if _, err := redisstore.New(ctx, good); err != nil {
		t.Fatalf("New with the password: %v", err)
	}
}

// TestClaimWrongTypeLeavesNothing: a claim whose index key has the wrong
// type (WRONGTYPE) fails naming the key and writes nothing: no running
// record is left behind, so that once the key is repaired, an AtMostOnce
// Run (even after the lease would have expired) runs fn rather than
// reporting the key unknown.
func TestClaimWrongTypeLeavesNothing(t *testing.T) {
	t.Parallel()
	c := newClient(t)
	ctx := context.Background()
	for _, bad := range []string{"periods:wt", "jobs"} {
		t.Run(bad, func(t *testing.T) {
			t.Parallel()
			s := openStore(t, c)
			badKey := "{" + s.Prefix() + "}:" + bad
			if err := c.Set(ctx, badKey, "not a sorted set", 0).Err(); err != nil {
				t.Fatal(err)
			}
			k := idem.Key{Job: "wt", Period: "2026-10-27"}
			ran := 0
			fn := func(context.Context) error { ran++; return nil }
			err := s.Run(ctx, k, fn, idem.AtMostOnce())
			if err == nil || !strings.Contains(err.Error(), "WRONGTYPE") || !strings.Contains(err.Error(), badKey) || ran != 0 {
				t.Errorf("Run with %s a string: %v (fn ran %d times); want a WRONGTYPE error naming the key, fn not run", badKey, err, ran)
			}
			if rec, ok, err := s.Lookup(ctx, k); err != nil || ok {
				t.Errorf("after the failed claim the key has a record: %+v, %v, %v; want none", rec, ok, err)
			}
			if err := c.Del(ctx, badKey).Err(); err != nil {
				t.Fatal(err)
			}
			if err := shiftTimes(s, 24*time.Hour); err != nil { // any lease left behind has expired
				t.Fatal(err)
			}
			if err := s.Run(ctx, k, fn, idem.AtMostOnce()); err != nil || ran != 1 {
				t.Fatalf("AtMostOnce Run once %s is repaired: %v, fn ran %d times; want nil and once", badKey, err, ran)
			}
		})
	}
}

// TestRetryClaimWrongTypeLeavesNothing: the claim of a key that has a
// record (a retry after a failure) refuses a job key of the wrong type
// before fn runs, as the claim of a new key does, though only the end of
// a run that moves the cursor writes it: fn does not run, and the failed
// record stays as it was.
func TestRetryClaimWrongTypeLeavesNothing(t *testing.T) {
	t.Parallel()
	c := newClient(t)
	ctx := context.Background()
	s := openStore(t, c)
	k := idem.Key{Job: "wtr", Period: "2026-10-27"}
	err := s.Run(ctx, k, func(context.Context) error { return errors.New("first attempt fails") }, idem.RetryWithin(0))
	if !errors.Is(err, idem.ErrBackingOff) {
		t.Fatalf("first Run: %v; want ErrBackingOff", err)
	}
	if err := shiftTimes(s, 24*time.Hour); err != nil { // its backoff is over
		t.Fatal(err)
	}
	badKey := "{" + s.Prefix() + "}:job:wtr"
	if err := c.Set(ctx, badKey, "not a hash", 0).Err(); err != nil {
		t.Fatal(err)
	}
	ran := 0
	err = s.Run(ctx, k, func(context.Context) error { ran++; return nil })
	if err == nil || !strings.Contains(err.Error(), "WRONGTYPE") || !strings.Contains(err.Error(), badKey) || ran != 0 {
		t.Fatalf("retry with %s a string: %v (fn ran %d times); want a WRONGTYPE error naming the key, fn not run", badKey, err, ran)
	}
	runKey := "{" + s.Prefix() + "}:run:3:wtr:2026-10-27"
	if v, err := c.HMGet(ctx, runKey, "status", "attempt").Result(); err != nil || v[0] != "failed" || v[1] != "1" {
		t.Fatalf("%s after the refused claim: %v, %v; want the failed record of attempt 1", runKey, v, err)
	}
}
