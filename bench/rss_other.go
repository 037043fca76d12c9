//go:build !unix

package main

import "os"

func maxRSSKiB(*os.ProcessState) (int64, bool) { return 0, false }
