//go:build !linux

package idem

import (
	"context"
	"os"
	"time"
)

// writeQueue: no write queue here (see ledger_queue.go); writes wait for
// SQLite's write lock in its busy handler.
type writeQueue struct{}

// openWriteQueue returns nil: there is no queue on this system.
func openWriteQueue(string, os.FileInfo) *writeQueue { return nil }

func (*writeQueue) turn(context.Context, time.Time, time.Time, bool) (bool, error) { return false, nil }
func (*writeQueue) holding() bool                                                  { return false }
func (*writeQueue) join(context.Context, time.Time, time.Time) error               { return nil }
func (*writeQueue) leave()                                                         {}
func (*writeQueue) close()                                                         {}
