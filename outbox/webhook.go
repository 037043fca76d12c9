package outbox

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"

	"github.com/idemgo/idem"
)

// Webhook returns a [Deliverer] that POSTs each message's payload to url
// with client (http.DefaultClient when nil). The request carries the
// message's headers (those Put stored; with a traced relay, module
// github.com/idemgo/idem/otel, traceparent and tracestate are the
// delivery span's, so the receiver's span joins the trace of the body
// that queued the message), and Idempotency-Key set to the message id (the
// receiver dedupes by it: a message may arrive more than once), plus
// Idem-Topic and Idem-Attempt. A 2xx answer means delivered; 4xx other
// than 408 and 429 is an [idem.Permanent] failure (the message parks at once:
// a retry would get the same answer); any other answer, or no answer,
// fails the attempt, retried after the relay's backoff. The request's
// deadline is the delivery's: the relay's lease (see [WithLease]), or
// client.Timeout if that is shorter.
//
// The receiver must dedupe by Idempotency-Key alone, not by the pair of id
// and Idem-Attempt: besides redeliveries after a crash or a lost answer
// (each a new attempt), net/http's Transport itself sends a request that
// carries an Idempotency-Key header again, unchanged, when the kept-alive
// connection it went out on was closed before any answer came, so one
// attempt can reach the receiver twice.
func Webhook(url string, client *http.Client) Deliverer {
	if client == nil {
		client = http.DefaultClient
	}
	return DeliverFunc(func(ctx context.Context, d Delivery) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(d.Payload))
		if err != nil {
			return idem.Permanent(fmt.Errorf("idem: webhook %s: %w", url, err))
		}
		for k, v := range d.Headers {
			req.Header.Set(k, v)
		}
		if req.Header.Get("Content-Type") == "" {
			req.Header.Set("Content-Type", "application/octet-stream")
		}
		req.Header.Set("Idempotency-Key", d.ID)
		req.Header.Set("Idem-Topic", d.Topic)
		req.Header.Set("Idem-Attempt", strconv.Itoa(d.Attempt))
		resp, err := client.Do(req)
		if err != nil {
			return fmt.Errorf("idem: webhook %s: %w", url, err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10)) // lets the connection be reused
		code := resp.StatusCode
		if code >= 200 && code < 300 {
			return nil
		}
		err = fmt.Errorf("idem: webhook %s: message %s: %s: %q", url, d.ID, resp.Status, body)
		if code >= 400 && code < 500 && code != http.StatusRequestTimeout && code != http.StatusTooManyRequests {
			return idem.Permanent(err)
		}
		return err
	})
}
