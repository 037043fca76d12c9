// Package testns runs a test again in a user and mount namespace of its
// own, where it may mount a tmpfs without root: a real file system that
// fills up or turns read-only, seen by that process alone.
//
//	func TestFull(t *testing.T) {
//		if dir := os.Getenv(envFull); dir != "" {
//			testns.MountTmpfs(t, dir, "2m")
//			... // the test, on a 2 MiB tmpfs at dir
//			return
//		}
//		testns.Run(t, envFull)
//	}
package testns
