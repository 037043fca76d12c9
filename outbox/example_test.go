package outbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/outbox"
)

// A settlement writes its rows and queues a notification to a payment
// system in ONE transaction; the relay posts the notification with the
// webhook deliverer, and the receiver dedupes by Idempotency-Key. A
// rolled-back settlement queues nothing; a re-run of the done day queues
// nothing more.
func ExamplePut() {
	dir, _ := os.MkdirTemp("", "idem-example")
	defer os.RemoveAll(dir)
	ledger, err := idem.OpenLedger(filepath.Join(dir, "ledger.db"))
	if err != nil {
		log.Fatal(err)
	}
	defer ledger.Close()
	ctx := context.Background()
	if _, err := ledger.DB().Exec(`CREATE TABLE settlements(day TEXT PRIMARY KEY, total INTEGER NOT NULL)`); err != nil {
		log.Fatal(err)
	}

	// The payment system: applies each notification once, by its key.
	var mu sync.Mutex
	applied := map[string]string{}
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		defer mu.Unlock()
		if _, dup := applied[r.Header.Get("Idempotency-Key")]; !dup {
			applied[r.Header.Get("Idempotency-Key")] = string(body)
		}
	}))
	defer receiver.Close()

	settle := func(day string, total int) error {
		return ledger.RunTx(ctx, idem.Key{Job: "settle", Period: day}, func(ctx context.Context, tx *sql.Tx) error {
			if _, err := tx.ExecContext(ctx, `INSERT INTO settlements VALUES(?, ?)`, day, total); err != nil {
				return err
			}
			_, err := outbox.Put(ctx, tx, outbox.Message{Topic: "payments", Payload: []byte(fmt.Sprintf(`{"day":%q,"total":%d}`, day, total))})
			if total < 0 {
				return idem.Permanent(fmt.Errorf("negative total %d", total)) // rolls back the row and the message
			}
			return err
		})
	}
	fmt.Println("2026-10-27:", settle("2026-10-27", 1200))
	fmt.Println("2026-10-27 again:", settle("2026-10-27", 1200))
	fmt.Println("2026-10-28 fails:", settle("2026-10-28", -5) != nil)

	res, err := outbox.RelayOnce(ctx, ledger, outbox.Webhook(receiver.URL, receiver.Client()))
	fmt.Printf("relay: %d delivered, %v\n", res.Delivered, err)
	mu.Lock()
	defer mu.Unlock()
	for id, body := range applied {
		fmt.Println(id == idem.Key{Job: "settle", Period: "2026-10-27"}.RequestID()+"-0", body)
	}
	// Output:
	// 2026-10-27: <nil>
	// 2026-10-27 again: <nil>
	// 2026-10-28 fails: true
	// relay: 1 delivered, <nil>
	// true {"day":"2026-10-27","total":1200}
}
