package fanout_test

import (
	"testing"

	"github.com/idemgo/idem/fanout"
	"github.com/idemgo/idem/internal/core"
)

// TestDefaultWorkersIsTheEngines: the documented default is the one the
// item engine applies when no WithWorkers is given.
func TestDefaultWorkersIsTheEngines(t *testing.T) {
	if got := core.R.DefaultWorkers(); got != fanout.DefaultWorkers {
		t.Fatalf("the engine works %d items at once by default, fanout.DefaultWorkers says %d", got, fanout.DefaultWorkers)
	}
}
