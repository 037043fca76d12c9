package schedtest

import (
	"context"
	"errors"
	"testing"

	"github.com/idemgo/idem/internal/testwait"
	"github.com/idemgo/idem/scheduler"
)

// Start runs s until the test ends; the test fails if Run returns anything
// but scheduler.ErrClosed.
func Start(t *testing.T, s *scheduler.Scheduler) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- s.Run(context.Background()) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), testwait.Limit(t))
		defer cancel()
		if err := s.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
		if err := testwait.Recv(t, done, "Run to return"); !errors.Is(err, scheduler.ErrClosed) {
			t.Errorf("Run returned %v, want ErrSchedulerClosed", err)
		}
	})
}
