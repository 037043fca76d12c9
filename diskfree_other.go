//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package idem

// fsFull reports whether the file system of dir is full: not known here.
func fsFull(dir string) (bool, string) { return false, "" }

// fileLimit describes this process's limit of open files.
func fileLimit() string { return "the limit of open files is reached" }
