//go:build unix

package idem

import (
	"errors"
	"os"
	"syscall"
)

// tryLockExclusive takes an exclusive flock on f without waiting; ok is
// false if another open file holds one.
func tryLockExclusive(f *os.File) (ok bool, err error) {
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return false, nil
		}
		return false, err
	}
	return true, nil
}

// lockExclusive takes an exclusive flock on f, waiting while another open
// file holds one.
func lockExclusive(f *os.File) error {
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX)
		if !errors.Is(err, syscall.EINTR) {
			return err
		}
	}
}
