//go:build windows

package idem

import (
	"errors"
	"os"
)

// checkWritable reports a file p whose read-only attribute is set. Windows
// has no access(2): access control lists are not checked, and a directory's
// read-only attribute does not keep files from being created in it, so a
// directory is never reported. A write that fails for another reason is
// reported without this explanation.
func checkWritable(p string) error {
	fi, err := os.Stat(p)
	if err != nil {
		return err
	}
	if !fi.IsDir() && fi.Mode().Perm()&0o200 == 0 {
		return errors.New("the read-only attribute is set")
	}
	return nil
}
