package limit_test

import (
	"testing"

	"github.com/idemgo/idem/internal/testledger"
)

// TestMain runs up to four parallel tests per CPU unless -parallel is given
// (see testledger.Main).
func TestMain(m *testing.M) { testledger.Main(m) }
