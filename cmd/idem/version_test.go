//go:build unix

package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestVersion: `idem version` prints the module's version, the commit the
// binary was built from and the Go version, from the build info: the VCS
// stamp of a build in a checkout (go build -buildvcs=true names HEAD), or
// the commit a release build sets with -ldflags "-X main.commit=…".
func TestVersion(t *testing.T) {
	t.Parallel()
	version := func(t *testing.T, args ...string) []string {
		t.Helper()
		bin := filepath.Join(t.TempDir(), "idem")
		build := exec.Command("go", append(append([]string{"build", "-o", bin}, args...), ".")...)
		build.Env = append(os.Environ(), buildEnv...) // as TestMain's build
		if out, err := build.CombinedOutput(); err != nil {
			t.Fatalf("go build %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		out, err := exec.Command(bin, "version").Output()
		if err != nil {
			t.Fatalf("idem version: %v", err)
		}
		f := strings.Fields(string(out))
		if len(f) != 5 || f[0] != "idem" || f[2] != "commit" || !strings.HasPrefix(f[4], "go1.") {
			t.Fatalf("idem version printed %q; want \"idem VERSION commit COMMIT goVERSION\"", out)
		}
		return f
	}
	t.Run("release", func(t *testing.T) {
		t.Parallel()
		f := version(t, "-buildvcs=false", "-ldflags=-X main.commit=0123abcd")
		if f[1] != "(devel)" || f[3] != "0123abcd" {
			t.Errorf("version %s commit %s; want (devel) and the -X commit 0123abcd", f[1], f[3])
		}
	})
	t.Run("checkout", func(t *testing.T) {
		t.Parallel()
		head, err := exec.Command("git", "rev-parse", "HEAD").Output()
		if err != nil {
			t.Skipf("no git checkout to compare the commit with: %v", err)
		}
		f := version(t, "-buildvcs=true")
		if rev := strings.TrimSuffix(f[3], "+modified"); rev != strings.TrimSpace(string(head)) {
			t.Errorf("commit %q; want HEAD, %s", f[3], strings.TrimSpace(string(head)))
		}
	})
}
