package redisstore_test

import (
	"testing"

	"github.com/idemgo/idem/idemtest"
)

// TestModel compares the store with the reference model of
// idemtest.TestModel after every operation of random sequences. The
// server's clock moves with the model's through Shift, as in
// TestConformance. A long run: IDEM_MODEL_OPS=100000 (and IDEM_MODEL_SEED
// to reproduce a failure).
func TestModel(t *testing.T) {
	t.Parallel()
	idemtest.TestModel(t, harness(newClient(t)), idemtest.ModelOptions{Parallel: true})
}
