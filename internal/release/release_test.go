package main

import (
	"archive/zip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// toyRepo makes a git repository holding two modules laid out as this
// repository's: github.com/idemgo/idem at the root and .../sub requiring
// it at v0.0.0, with a go.work that maps that version to the root, and an
// unpublished .../tool. It returns the repository's directory.
func toyRepo(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skipf("no git: %v", err)
	}
	dir := t.TempDir()
	files := map[string]string{
		"go.mod":              "module github.com/idemgo/idem\n\ngo 1.26\n",
		"idem.go":             "package idem\n\n// Answer is what sub uses.\nconst Answer = 42\n",
		"LICENSE":             "MIT\n",
		"sub/go.mod":          "module github.com/idemgo/idem/sub\n\ngo 1.26\n\nrequire github.com/idemgo/idem v0.0.0\n",
		"sub/sub.go":          "package sub\n\nimport \"github.com/idemgo/idem\"\n\n// Answer is idem's.\nconst Answer = idem.Answer\n",
		"tool/go.mod":         "// Not published: a tool.\nmodule github.com/idemgo/idem/tool\n\ngo 1.26\n",
		"tool/main.go":        "package main\n\nfunc main() {}\n",
		"cmd/idem/.keep":      "",
		"cmd/idem/README":     "the commit file lives here\n",
		"go.work":             "go 1.26\n\nuse (\n\t.\n\t./sub\n\t./tool\n)\n\nreplace github.com/idemgo/idem v0.0.0 => ./\n",
		".gitignore":          "/dist/\n",
		"dist/ignored-binary": "not in any release\n",
	}
	for name, data := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	gitIn(t, dir, "init", "-q")
	gitIn(t, dir, "add", "-A")
	gitIn(t, dir, "commit", "-q", "-m", "toy")
	return dir
}

func gitIn(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@localhost", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@localhost")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

func withGitIdentity(t *testing.T) {
	for k, v := range map[string]string{"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@localhost", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@localhost"} {
		t.Setenv(k, v)
	}
}

// TestPrepareThenInstallFromProxy: after prepare, sub requires the root at
// the version, go.work maps it, the tags exist in dependency order, and —
// what proves the hashes — sub builds outside the workspace from a proxy
// made by buildProxy, with -mod=readonly (a wrong or missing go.sum line
// fails it) and a fresh module cache.
func TestPrepareThenInstallFromProxy(t *testing.T) {
	withGitIdentity(t)
	dir := toyRepo(t)
	if err := prepare(dir, "v0.3.0"); err != nil {
		t.Fatal(err)
	}
	gomod, _ := os.ReadFile(filepath.Join(dir, "sub", "go.mod"))
	if !strings.Contains(string(gomod), "github.com/idemgo/idem v0.3.0") {
		t.Errorf("sub/go.mod after prepare:\n%s", gomod)
	}
	work, _ := os.ReadFile(filepath.Join(dir, "go.work"))
	if !strings.Contains(string(work), "github.com/idemgo/idem v0.3.0 => ./") || strings.Contains(string(work), "v0.0.0") {
		t.Errorf("go.work after prepare:\n%s", work)
	}
	if got := strings.Fields(gitIn(t, dir, "tag")); strings.Join(got, " ") != "sub/v0.3.0 v0.3.0" {
		t.Errorf("tags %q; want v0.3.0 and sub/v0.3.0 (tool is not published)", got)
	}
	head := strings.TrimSpace(gitIn(t, dir, "rev-parse", "HEAD^"))
	if c, _ := os.ReadFile(filepath.Join(dir, filepath.FromSlash(commitFile))); strings.TrimSpace(string(c)) != head {
		t.Errorf("%s holds %q; want the commit the release was prepared from, %s", commitFile, c, head)
	}
	if s := gitIn(t, dir, "status", "--porcelain"); s != "" {
		t.Errorf("prepare left changes out of its commit:\n%s", s)
	}
	proxy := t.TempDir()
	if err := buildProxy(dir, "v0.3.0", proxy); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(proxy, "github.com", "idemgo", "idem", "tool")); err == nil {
		t.Errorf("the proxy serves the unpublished module tool")
	}
	z, err := zip.OpenReader(filepath.Join(proxy, "github.com", "idemgo", "idem", "@v", "v0.3.0.zip"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range z.File {
		if strings.Contains(f.Name, "/dist/") || strings.Contains(f.Name, "/sub/") || strings.Contains(f.Name, "/tool/") {
			t.Errorf("the root module's zip holds %s: an ignored file or a nested module's", f.Name)
		}
	}
	z.Close()
	build := exec.Command("go", "build", "./...")
	build.Dir = filepath.Join(dir, "sub")
	build.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=readonly -modcacherw", "GONOSUMDB=github.com/idemgo",
		"GOPROXY=file://"+proxy, "GOMODCACHE="+t.TempDir())
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("sub does not build from the proxy with its go.sum: %v\n%s", err, out)
	}
}

// TestPrepareRefuses: a tree with changes, modules out of step, a version
// not above the current one or not canonical, and an existing tag; each
// refusal leaves the tree and the tags as they were.
func TestPrepareRefuses(t *testing.T) {
	withGitIdentity(t)
	cases := []struct {
		name, version, want string
		spoil               func(t *testing.T, dir string)
	}{
		{"dirty tree", "v0.3.0", "the tree has changes", func(t *testing.T, dir string) {
			os.WriteFile(filepath.Join(dir, "idem.go"), []byte("package idem\n\nconst Answer = 43\n"), 0o644)
		}},
		{"replace in a go.mod", "v0.3.0", "replaces github.com/idemgo/idem", func(t *testing.T, dir string) {
			f := filepath.Join(dir, "sub", "go.mod")
			data, _ := os.ReadFile(f)
			os.WriteFile(f, append(data, "\nreplace github.com/idemgo/idem => ../\n"...), 0o644)
			gitIn(t, dir, "commit", "-q", "-am", "spoil")
		}},
		{"go.work out of step", "v0.3.0", "go.work maps github.com/idemgo/idem v0.0.0", func(t *testing.T, dir string) {
			os.WriteFile(filepath.Join(dir, "go.work"), []byte("go 1.26\n\nuse (\n\t.\n\t./sub\n\t./tool\n)\n"), 0o644)
			gitIn(t, dir, "commit", "-q", "-am", "spoil")
		}},
		{"not canonical", "v0.3", "canonical semantic version", nil},
		{"major 2", "v2.0.0", "major version v2", nil},
		{"tag exists", "v0.3.0", "tag v0.3.0 exists", func(t *testing.T, dir string) { gitIn(t, dir, "tag", "v0.3.0") }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := toyRepo(t)
			if c.spoil != nil {
				c.spoil(t, dir)
			}
			before := gitIn(t, dir, "rev-parse", "HEAD") + gitIn(t, dir, "tag") + gitIn(t, dir, "status", "--porcelain")
			err := prepare(dir, c.version)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("prepare %s: %v; want an error saying %q", c.version, err, c.want)
			}
			if after := gitIn(t, dir, "rev-parse", "HEAD") + gitIn(t, dir, "tag") + gitIn(t, dir, "status", "--porcelain"); after != before {
				t.Errorf("a refused prepare changed the repository:\nbefore %s\nafter  %s", before, after)
			}
		})
	}
	t.Run("not above the current version", func(t *testing.T) {
		dir := toyRepo(t)
		if err := prepare(dir, "v0.3.0"); err != nil {
			t.Fatal(err)
		}
		if err := prepare(dir, "v0.2.9"); err == nil || !strings.Contains(err.Error(), "not above v0.3.0") {
			t.Errorf("prepare v0.2.9 after v0.3.0: %v; want a refusal", err)
		}
	})
}
