//go:build windows

package guard

import (
	"os"
	"path/filepath"

	"golang.org/x/sys/windows"
)

// freeBytes is the space free to this user on the volume holding p.
func freeBytes(p string) (uint64, error) {
	fi, err := os.Stat(p)
	if err != nil {
		return 0, err
	}
	if !fi.IsDir() { // GetDiskFreeSpaceEx takes a directory
		p = filepath.Dir(p)
	}
	name, err := windows.UTF16PtrFromString(p)
	if err != nil {
		return 0, err
	}
	var free uint64
	if err := windows.GetDiskFreeSpaceEx(name, &free, nil, nil); err != nil {
		return 0, err
	}
	return free, nil
}
