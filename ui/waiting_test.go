package ui_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/ui/internal/uitest"
)

// TestOverviewShowsWaiting: with the jobs' dependencies (Options.After),
// the overview says which period of a job waits for which upstream periods
// (escaped, with their status), rather than calling the job late; a job
// whose upstream is done is late again.
func TestOverviewShowsWaiting(t *testing.T) {
	l, o := uitest.WaitingLedger(t)
	h := uitest.NewHandler(t, l, o)
	code, body := localGet(t, h, "/")
	if code != http.StatusOK {
		t.Fatalf("GET /: %d\n%s", code, body)
	}
	for _, want := range []string{
		"2026-10-28 waits for settle/2026-10-28 (not run yet)",
		"2026-09 waits for settle/2026-09-01 (not run yet), settle/2026-09-02 (not run yet), settle/2026-09-03 (not run yet) and 27 more",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("the overview has no %q:\n%s", want, body)
		}
	}
	if err := l.Run(context.Background(), idem.Key{Job: "settle", Period: "2026-10-28"}, func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
	_, body = localGet(t, h, "/")
	if strings.Contains(body, "2026-10-28 waits for") || !strings.Contains(body, `<span class="s-late">late</span>`) {
		t.Errorf("once settle/2026-10-28 is done, mail is late, not waiting:\n%s", body)
	}
}
