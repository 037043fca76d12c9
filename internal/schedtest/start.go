package schedtest

import (
	"context"
	"errors"
	"testing"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/internal/testwait"
)

// Start runs s until the test ends; the test fails if Run returns anything
// but idem.ErrSchedulerClosed.
func Start(t *testing.T, s *idem.Scheduler) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- s.Run(context.Background()) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), testwait.Limit(t))
		defer cancel()
		if err := s.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
		if err := testwait.Recv(t, done, "Run to return"); !errors.Is(err, idem.ErrSchedulerClosed) {
			t.Errorf("Run returned %v, want ErrSchedulerClosed", err)
		}
	})
}
