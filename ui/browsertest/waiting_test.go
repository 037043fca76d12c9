package browsertest_test

import (
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/idemgo/idem/ui/internal/uitest"
)

// TestBrowserWaiting: the overview in a real Chromium shows the waiting
// jobs and what they wait for.
func TestBrowserWaiting(t *testing.T) {
	l, o := uitest.WaitingLedger(t)
	base := serve(t, l, o)
	ctx := browser(t, false)
	step(t, ctx, "open the overview", chromedp.Navigate(base), chromedp.WaitVisible(chromedp.CSS("#jobs")))
	jobs := text(t, ctx, "#jobs")
	if miss := uitest.Has(jobs, "waiting 2026-10-28 waits for settle/2026-10-28 (not run yet)", "2026-09 waits for settle/2026-09-01"); miss != "" {
		t.Errorf("the overview has no %q:\n%s", miss, jobs)
	}
}
