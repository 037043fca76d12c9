package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/internal/schedtest"
	"github.com/idemgo/idem/internal/testwait"
)

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestService runs the service's Scheduler on a fake clock from 01:30 to
// 02:00 Shanghai time: yesterday is settled at 02:00, the hours as they
// end, and /healthz answers 200 with both jobs.
func TestService(t *testing.T) {
	l, err := idem.OpenLedger(filepath.Join(t.TempDir(), "ledger.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	sh := schedtest.Location(t, "Asia/Shanghai")
	clk := schedtest.NewClock(time.Date(2026, 10, 28, 1, 30, 0, 0, sh))
	var out syncBuffer
	s, err := newScheduler(l, &out, idem.WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Run(context.Background()) }()
	defer func() {
		if err := s.Shutdown(context.Background()); err != nil {
			t.Error(err)
		}
		if err := testwait.Recv(t, done, "Run to return"); !errors.Is(err, idem.ErrSchedulerClosed) {
			t.Error(err)
		}
	}()
	schedtest.Idle(t, s, clk.Now())
	clk.Advance(30 * time.Minute) // 02:00 Shanghai, 18:00 UTC
	for range 10 {                // the rollup's jitter: 10 s at most
		clk.Advance(time.Second)
	}
	clk.Advance(time.Minute)
	schedtest.Idle(t, s, clk.Now())
	got := out.String()
	for _, want := range []string{"settled 2026-10-26\n", "settled 2026-10-27\n", "rolled up 2026-10-27T17:00Z\n"} {
		if strings.Count(got, want) != 1 {
			t.Errorf("output %q, want %q once", got, want)
		}
	}
	rec := httptest.NewRecorder()
	s.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/healthz", nil))
	var st idem.SchedulerStatus
	if err := json.Unmarshal(rec.Body.Bytes(), &st); err != nil || rec.Code != 200 || len(st.Jobs) != 2 || !st.Ready {
		t.Errorf("/healthz: %d %s (%v)", rec.Code, rec.Body, err)
	}
}
