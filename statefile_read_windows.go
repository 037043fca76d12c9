//go:build windows

package idem

// readRegular reads the file at path, refusing anything but a regular file.
func readRegular(path string) ([]byte, error) { return readRegularFile(path) }
