//go:build linux

package testns

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"

	"github.com/idemgo/idem/internal/testwait"
)

// Run runs the test t again (its binary, -test.run of its name) in a user
// and mount namespace of its own, with env set to a new temporary
// directory, and fails t if that child fails. It skips t where the system
// does not allow such namespaces, or where the child skipped.
func Run(t *testing.T, env string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^"+t.Name()+"$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), env+"="+t.TempDir())
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Pdeathsig:   syscall.SIGKILL,
		Cloneflags:  syscall.CLONE_NEWUSER | syscall.CLONE_NEWNS,
		UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getuid(), Size: 1}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getgid(), Size: 1}},
	}
	if err := cmd.Start(); err != nil {
		if errors.Is(err, syscall.EPERM) || errors.Is(err, syscall.EINVAL) || errors.Is(err, syscall.ENOSPC) {
			t.Skipf("this system does not let the test create a user and mount namespace (to mount a tmpfs without root): %v", err)
		}
		t.Fatal(err)
	}
	err := testwait.Process(cmd, testwait.Limit(t))
	t.Logf("child in its own namespaces:\n%s", out.String())
	if err != nil {
		t.Fatalf("child: %v", err)
	}
	if strings.Contains(out.String(), "--- SKIP") {
		t.Skip("the child skipped: see its output")
	}
}

// MountTmpfs mounts a tmpfs of size (as mount(8) takes it: "3m") over dir,
// in the child Run started; nothing propagates to the parent's namespace.
// It skips t where the mount is refused.
func MountTmpfs(t *testing.T, dir, size string) {
	t.Helper()
	if err := syscall.Mount("", "/", "", syscall.MS_REC|syscall.MS_PRIVATE, ""); err != nil {
		t.Skipf("make / private in the new mount namespace: %v", err)
	}
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size="+size); err != nil {
		t.Skipf("mount a tmpfs in the new namespace: %v", err)
	}
}
