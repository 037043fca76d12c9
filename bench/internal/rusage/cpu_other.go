//go:build !unix

package rusage

import (
	"errors"
	"time"
)

func CPUTime() (time.Duration, error) {
	return 0, errors.New("getrusage: not on this system")
}
