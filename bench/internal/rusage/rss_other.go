//go:build !unix

package rusage

import "os"

func MaxRSSKiB(*os.ProcessState) (int64, bool) { return 0, false }
