package outbox

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"

	"github.com/idemgo/idem"
)

// TestWebhook: the webhook deliverer against a real HTTP server: the
// payload as the body, the message's headers, Idempotency-Key = the
// message id; 2xx delivered, 4xx but 408 and 429 permanent (parked at
// once), 408, 429, 5xx and a dropped connection retried.
func TestWebhook(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var reqs []*http.Request
	var bodies []string
	status := http.StatusOK
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		reqs, bodies = append(reqs, r), append(bodies, string(b))
		code := status
		mu.Unlock()
		if code == 0 { // drop the connection
			hj, _ := w.(http.Hijacker)
			c, _, _ := hj.Hijack()
			c.Close()
			return
		}
		w.WriteHeader(code)
		_, _ = w.Write([]byte("answer " + strconv.Itoa(code)))
	}))
	defer srv.Close()
	wh := Webhook(srv.URL, srv.Client())
	d := Delivery{ID: "idem-abc-0", Topic: "payments", Payload: []byte(`{"n":1}`), Attempt: 3,
		Headers: map[string]string{"Content-Type": "application/json", "X-Tenant": "t1"}}
	ctx := context.Background()
	if err := wh.Deliver(ctx, d); err != nil {
		t.Fatal(err)
	}
	r := reqs[0]
	if r.Method != http.MethodPost || bodies[0] != `{"n":1}` || r.Header.Get("Idempotency-Key") != "idem-abc-0" ||
		r.Header.Get("Content-Type") != "application/json" || r.Header.Get("X-Tenant") != "t1" ||
		r.Header.Get("Idem-Topic") != "payments" || r.Header.Get("Idem-Attempt") != "3" {
		t.Fatalf("request %s %v body %q", r.Method, r.Header, bodies[0])
	}
	for _, c := range []struct {
		code      int
		permanent bool
	}{
		{http.StatusNoContent, false}, {http.StatusAccepted, false},
		{http.StatusBadRequest, true}, {http.StatusNotFound, true}, {http.StatusUnprocessableEntity, true}, {http.StatusConflict, true},
		{http.StatusRequestTimeout, false}, {http.StatusTooManyRequests, false},
		{http.StatusInternalServerError, false}, {http.StatusServiceUnavailable, false}, {http.StatusMovedPermanently + 8, false}, {0, false},
	} {
		mu.Lock()
		status = c.code
		mu.Unlock()
		err := wh.Deliver(ctx, d)
		ok := c.code >= 200 && c.code < 300
		if (err == nil) != ok {
			t.Fatalf("status %d: %v", c.code, err)
		}
		if err != nil && idem.IsPermanent(err) != c.permanent {
			t.Fatalf("status %d: %v, permanent %v, want %v", c.code, err, !c.permanent, c.permanent)
		}
	}
}
