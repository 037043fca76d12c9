package main

import (
	"bytes"
	"context"
	"io"
	"strings"
	"testing"
)

// TestOneTraceFromSlotToReceiver: the demo's trace holds, in one tree,
// the Scheduler's slot, its catch-up, the period's RunTx and attempt, the
// relay's delivery and the receiver's span.
func TestOneTraceFromSlotToReceiver(t *testing.T) {
	var tree bytes.Buffer
	if err := run(context.Background(), io.Discard, &tree); err != nil {
		t.Fatal(err)
	}
	want := "trace %s:\n" +
		"   scheduler report\n" +
		"      catchup report\n" +
		"         idem.RunTx report\n" +
		"            attempt report\n" +
		"               outbox.deliver reports\n" +
		"                  receiver POST /reports\n"
	got := tree.String()
	first, _, _ := strings.Cut(got, ":\n")
	want = strings.Replace(want, "trace %s", first, 1)
	if !strings.HasPrefix(got, want) {
		t.Fatalf("the trace:\n%s\nwant it to start with:\n%s", got, want)
	}
}
