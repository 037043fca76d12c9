package harness

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// OldReleaseEnv names a commit to take as the previous release instead of
// the one PreviousRelease finds (to check that a rolling-upgrade test fails
// against a release that does not tolerate the next schema).
const OldReleaseEnv = "IDEM_ROLLING_OLD"

// Release names a store's schema in the repository: the file that declares
// its SchemaVersion (relative to the repository's root), its current
// version, and the module (its directory, "" for the root) and package
// (relative to the module, "./internal/torture") of its torture command.
type Release struct {
	File    string
	Version int
	Module  string
	Pkg     string
}

// OldWorker builds the torture command of the previous release, the
// parent of the last commit that changed rel's SchemaVersion to its current
// value (or $IDEM_ROLLING_OLD), from a git worktree of that commit, and
// returns the binary; the worktree is removed at once. It fails if the old
// release's SchemaVersion is not exactly one less. Without git, the
// repository's history or the go command it skips, except under CI, where
// it fails.
func OldWorker(t *testing.T, rel Release) string {
	t.Helper()
	unavailable := func(format string, a ...any) {
		t.Helper()
		msg := fmt.Sprintf(format, a...)
		if v := os.Getenv("CI"); v != "" && v != "false" && v != "0" {
			t.Fatalf("%s; CI must run the rolling-upgrade test (a full clone, git and go)", msg)
		}
		t.Skipf("%s: the rolling-upgrade test needs git, the repository's history and the go command", msg)
	}
	goCmd, err := exec.LookPath("go")
	if err != nil {
		unavailable("no go command: %v", err)
	}
	if _, err := exec.LookPath("git"); err != nil {
		unavailable("no git: %v", err)
	}
	root, err := git("", "rev-parse", "--show-toplevel")
	if err != nil {
		unavailable("not in a git repository: %v", err)
	}
	old := os.Getenv(OldReleaseEnv)
	if old == "" {
		changed, err := git(root, "log", "-1", "--format=%H", fmt.Sprintf("-SSchemaVersion = %d", rel.Version), "--", rel.File)
		if err != nil || changed == "" {
			unavailable("no commit in the history sets %s's SchemaVersion to %d (a shallow clone?): %v", rel.File, rel.Version, err)
		}
		old = changed + "^"
	}
	hash, err := git(root, "rev-parse", "--verify", old+"^{commit}")
	if err != nil {
		unavailable("commit %s: %v", old, err)
	}
	src, err := git(root, "show", hash+":"+rel.File)
	if err != nil {
		t.Fatalf("%s at %s: %v", rel.File, hash, err)
	}
	m := regexp.MustCompile(`(?m)^const SchemaVersion = (\d+)$`).FindStringSubmatch(src)
	if m == nil {
		t.Fatalf("%s at %s declares no SchemaVersion", rel.File, hash)
	}
	if v, _ := strconv.Atoi(m[1]); v != rel.Version-1 {
		t.Fatalf("the previous release %s has SchemaVersion %d in %s, want %d (one less than this tree's)", hash, v, rel.File, rel.Version-1)
	}
	dir := t.TempDir()
	tree := filepath.Join(dir, "src")
	if _, err := git(root, "worktree", "add", "--detach", tree, hash); err != nil {
		t.Fatalf("git worktree add %s %s: %v", tree, hash, err)
	}
	defer func() {
		if _, err := git(root, "worktree", "remove", "--force", tree); err != nil {
			t.Errorf("git worktree remove %s: %v", tree, err)
		}
	}()
	bin := filepath.Join(dir, "torture-old")
	build := exec.Command(goCmd, "build", "-o", bin, rel.Pkg)
	build.Dir = filepath.Join(tree, rel.Module)
	// cgo off, as scripts/test.sh builds everything it runs without the
	// race detector: the old worker then reuses what those builds compiled
	// (modernc.org/sqlite above all) where its dependencies are the same.
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building %s at %s (%s): %v\n%s", rel.Pkg, hash, build.Dir, err, out)
	}
	t.Logf("previous release: %s (SchemaVersion %d), worker %s", hash, rel.Version-1, bin)
	return bin
}

// git runs git in dir ("" = the current directory) and returns its trimmed
// output.
func git(dir string, args ...string) (string, error) {
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return "", fmt.Errorf("git %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(ee.Stderr)))
		}
		return "", fmt.Errorf("git %s: %v", strings.Join(args, " "), err)
	}
	return strings.TrimSpace(string(out)), nil
}
