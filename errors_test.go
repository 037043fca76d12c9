package idem_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemstore"
)

// TestInProgressErrorNamesHolderShortly: a Run that finds its key held by
// a live attempt says which host and process hold it, without the owner's
// random part and the fields that prove a process's death (kept whole in
// Error.Holder for programs).
func TestInProgressErrorNamesHolderShortly(t *testing.T) {
	ctx := context.Background()
	l := openLedger(t, t.TempDir())
	key := idem.Key{Job: "held", Period: "2026-10-27"}
	inside, release := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- l.Run(ctx, key, func(context.Context) error {
			close(inside)
			<-release
			return nil
		})
	}()
	<-inside
	err := l.Run(ctx, key, func(context.Context) error { return errors.New("ran while held") })
	close(release)
	if err := <-done; err != nil {
		t.Fatalf("the holder's Run: %v", err)
	}
	var ie *idem.Error
	if !errors.Is(err, idem.ErrInProgress) || !errors.As(err, &ie) {
		t.Fatalf("second Run: %v; want ErrInProgress", err)
	}
	if ie.Holder != idemstore.Owner() {
		t.Fatalf("Error.Holder = %q; want the owner as stored, %q", ie.Holder, idemstore.Owner())
	}
	host, _ := os.Hostname()
	want := fmt.Sprintf("(held by %s pid %d)", host, os.Getpid())
	if msg := err.Error(); !strings.Contains(msg, want) || strings.Contains(msg, ";") || len(msg) > 120 {
		t.Fatalf("message %q (%d characters); want it to contain %q and no owner fields", msg, len(msg), want)
	}
}
