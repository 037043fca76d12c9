package pgledger_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemtest"
	"github.com/idemgo/idem/pgledger"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// pgFaults breaks the connections of one pool for idemtest.TestModel's
// store faults (idemtest.FaultHarness): armed, the next write (a statement
// in a transaction, a statement outside one that changes data, or a
// commit) either has its connection terminated by the server first
// (pg_terminate_backend, from another pool) or has its reply lost after
// the server applied it (lostReplyConn drops the answer and closes the
// connection). Its pgx.QueryTracer and pgx.BatchTracer see each statement
// and batch before it is sent.
type pgFaults struct {
	admin *pgxpool.Pool

	mu         sync.Mutex
	kill, lose bool // armed
	struck     bool
	conns      []*lostReplyConn // armed by lose for the operation under way

	kills, lost, leftArmed atomic.Int64
}

// errLostReply is what a statement whose reply was lost returns.
var errLostReply = errors.New("fault: the reply was lost after the server applied the write")

// isWrite reports whether a statement outside a transaction changes data.
func isWrite(sql string) bool {
	w := strings.ToUpper(strings.TrimSpace(sql))
	for _, p := range []string{"INSERT", "UPDATE", "DELETE", "WITH"} {
		if strings.HasPrefix(w, p) {
			return true
		}
	}
	return false
}

func (f *pgFaults) TraceQueryStart(ctx context.Context, conn *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	f.before(ctx, conn, strings.EqualFold(strings.TrimSpace(data.SQL), "commit"), isWrite(data.SQL))
	return ctx
}

func (f *pgFaults) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// A batch (one round trip, an implicit transaction outside one) is a
// write if one of its statements is.
func (f *pgFaults) TraceBatchStart(ctx context.Context, conn *pgx.Conn, data pgx.TraceBatchStartData) context.Context {
	write := false
	for _, q := range data.Batch.QueuedQueries {
		write = write || isWrite(q.SQL)
	}
	f.before(ctx, conn, false, write)
	return ctx
}

func (f *pgFaults) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (f *pgFaults) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData)     {}

// before breaks, if armed, the statement (or batch) about to be sent on
// conn.
func (f *pgFaults) before(ctx context.Context, conn *pgx.Conn, commit, write bool) {
	inTx := conn.PgConn().TxStatus() != 'I'
	f.mu.Lock()
	kill := f.kill && (inTx || write)
	lose := f.lose && (commit || (write && !inTx))
	if kill {
		f.kill = false
	}
	if lose {
		f.lose = false
	}
	f.mu.Unlock()
	switch {
	case kill:
		if err := terminate(ctx, f.admin, conn.PgConn().PID()); err == nil {
			f.kills.Add(1)
			f.hit()
		}
	case lose:
		if c, ok := conn.PgConn().Conn().(*lostReplyConn); ok {
			c.arm(f)
			f.mu.Lock()
			f.conns = append(f.conns, c)
			f.mu.Unlock()
		}
	}
}

// disarm ends the operation's fault: nothing more is to break, and a
// connection armed to lose a reply that it never read (a statement traced
// but not sent, or a connection that went back to the pool at once) is
// disarmed too, so that the fault cannot strike a later call, such as the
// model's own reads of the records after the operation (one List failed
// so in a clean-clone run, on a busy machine). It reports whether the
// fault struck.
func (f *pgFaults) disarm() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.kill, f.lose = false, false
	for _, c := range f.conns {
		if c.disarm(f) {
			f.leftArmed.Add(1)
		}
	}
	f.conns = nil
	s := f.struck
	f.struck = false
	return s
}

func (f *pgFaults) hit() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.struck = true
}

// terminate ends the server process of a connection and waits until it is
// gone.
func terminate(ctx context.Context, admin *pgxpool.Pool, pid uint32) error {
	if _, err := admin.Exec(ctx, `SELECT pg_terminate_backend($1)`, int64(pid)); err != nil {
		return err
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		var n int
		if err := admin.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE pid = $1`, int64(pid)).Scan(&n); err != nil {
			return err
		}
		if n == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the server process %d was still there 10s after pg_terminate_backend", pid)
		}
		time.Sleep(time.Millisecond)
	}
}

// lostReplyConn is a connection to the server that, armed, reads the
// answer to the next command whole (the server's messages up to
// ReadyForQuery) and, if the command completed, drops it and closes the
// connection: the server applied it, the client sees the connection
// break. An answer without a completed command (a statement's
// preparation) is passed on, and the next one waited for; an error's is
// passed on, and the fault is off.
type lostReplyConn struct {
	net.Conn

	mu    sync.Mutex
	armed *pgFaults
	out   []byte // read from the server, not yet given to the client
}

func (c *lostReplyConn) arm(f *pgFaults) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.armed = f
}

// disarm disarms c if f armed it, and reports whether it did.
func (c *lostReplyConn) disarm(f *pgFaults) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.armed != f {
		return false
	}
	c.armed = nil
	return true
}

func (c *lostReplyConn) Read(p []byte) (int, error) {
	if len(c.out) > 0 { // Read is called by one goroutine at a time: out is its own
		n := copy(p, c.out)
		c.out = c.out[n:]
		return n, nil
	}
	c.mu.Lock()
	f := c.armed
	c.mu.Unlock()
	if f == nil {
		return c.Conn.Read(p)
	}
	var acc []byte
	off, done, failed := 0, false, false
	buf := make([]byte, 8192)
	for {
		for len(acc)-off >= 5 {
			typ, l := acc[off], int(binary.BigEndian.Uint32(acc[off+1:off+5]))
			if len(acc)-off < 1+l {
				break
			}
			off += 1 + l
			switch typ {
			case 'C':
				done = true
			case 'E':
				failed = true
			case 'Z':
				if done && !failed {
					c.arm(nil)
					f.lost.Add(1)
					f.hit()
					c.Conn.Close()
					return 0, errLostReply
				}
				if failed {
					c.arm(nil)
				}
				return c.give(p, acc), nil
			}
		}
		n, err := c.Conn.Read(buf)
		acc = append(acc, buf[:n]...)
		if err != nil {
			c.arm(nil)
			if len(acc) == 0 {
				return 0, err
			}
			return c.give(p, acc), nil
		}
	}
}

// give passes b on: as much as fits in p now, the rest at the next reads.
func (c *lostReplyConn) give(p, b []byte) int {
	n := copy(p, b)
	c.out = b[n:]
	return n
}

// modelFaults is the model's harness on pools whose connections
// pgFaults breaks, each ledger on a pool of its own; struck counts what
// struck, over every ledger.
func modelFaults(t *testing.T) (h idemtest.Harness, struck func() (kills, lost, leftArmed int64)) {
	admin := newPool(t)
	var mu sync.Mutex
	of := map[*pgledger.Ledger]*pgFaults{}
	var all []*pgFaults
	h = harness(admin)
	h.Open = func(t *testing.T, clk idem.Clock) idem.Store {
		f := &pgFaults{admin: admin}
		cfg, err := pgxpool.ParseConfig(testDSN(t))
		if err != nil {
			t.Fatal(err)
		}
		cfg.ConnConfig.Tracer = f
		cfg.ConnConfig.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return &lostReplyConn{Conn: c}, nil
		}
		pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(pool.Close)
		l := openLedger(t, pool, pgledger.WithRunOptions(idem.WithClock(clk)))
		mu.Lock()
		defer mu.Unlock()
		of[l], all = f, append(all, f)
		return l
	}
	h.Faults = &idemtest.FaultHarness{Arm: func(t *testing.T, s idem.Store, kind idemtest.Fault) func() bool {
		mu.Lock()
		f := of[s.(*pgledger.Ledger)]
		mu.Unlock()
		f.mu.Lock()
		f.struck, f.kill, f.lose = false, kind == idemtest.FaultKill, kind == idemtest.FaultLoseReply
		f.mu.Unlock()
		return f.disarm
	}}
	return h, func() (kills, lost, leftArmed int64) {
		mu.Lock()
		defer mu.Unlock()
		for _, f := range all {
			kills += f.kills.Load()
			lost += f.lost.Load()
			leftArmed += f.leftArmed.Load()
		}
		return kills, lost, leftArmed
	}
}
