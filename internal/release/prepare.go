package main

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/mod/modfile"
	"golang.org/x/mod/semver"
)

// commitFile records, in a release, the commit it was prepared from:
// `idem version` prints it for a binary built from a module proxy, whose
// build info carries the version and no commit.
const commitFile = "cmd/idem/release_commit.txt"

// tagOf is module m's tag at version in Go's layout: VERSION for the root,
// DIR/VERSION for a module in DIR.
func tagOf(m *modInfo, version string) string {
	if m.Dir == "." {
		return version
	}
	return m.Dir + "/" + version
}

// checkVersion refuses what cannot be this repository's next version.
func checkVersion(version string) error {
	if !semver.IsValid(version) || semver.Canonical(version) != version {
		return fmt.Errorf("version %q: want a canonical semantic version such as v0.9.0 or v1.2.3-rc.1", version)
	}
	if m := semver.Major(version); m != "v0" && m != "v1" {
		return fmt.Errorf("version %s: major version %s needs /%s at the end of every module path; this tool releases v0 and v1", version, m, m)
	}
	return nil
}

func prepare(root, version string) error {
	if err := checkVersion(version); err != nil {
		return err
	}
	if err := clean(root); err != nil {
		return err
	}
	mods, err := readModules(root)
	if err != nil {
		return err
	}
	cur, err := inStep(root, mods)
	if err != nil {
		return err
	}
	if cur != "" && cur != "v0.0.0" && semver.Compare(version, cur) <= 0 {
		return fmt.Errorf("version %s is not above %s, the version the modules require each other at", version, cur)
	}
	var tags []string
	for _, m := range mods {
		if m.Published {
			tags = append(tags, tagOf(m, version))
		}
	}
	for _, t := range tags {
		if out, err := git(root, "tag", "--list", t); err != nil || strings.TrimSpace(out) != "" {
			return fmt.Errorf("tag %s exists already (or git failed: %v)", t, err)
		}
	}
	head, err := git(root, "rev-parse", "HEAD")
	if err != nil {
		return err
	}
	if err := writeRequirements(root, mods, version); err != nil {
		return err
	}
	if err := writeWork(root, cur, version); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(root, filepath.FromSlash(commitFile)), []byte(strings.TrimSpace(head)+"\n"), 0o644); err != nil {
		return err
	}
	if err := writeSums(root, mods, version); err != nil {
		return err
	}
	if _, err := git(root, "add", "-A"); err != nil {
		return err
	}
	if _, err := git(root, "commit", "-q", "-m", "Release "+version); err != nil {
		return err
	}
	for _, t := range tags {
		if _, err := git(root, "tag", "-a", "-m", "Release "+version, t); err != nil {
			return err
		}
	}
	fmt.Printf("committed \"Release %s\" and tagged, in dependency order:\n\t%s\npublish with:\n\tgit push origin HEAD %s\n",
		version, strings.Join(tags, "\n\t"), strings.Join(tags, " "))
	return nil
}

// writeRequirements makes every module require its siblings at version.
func writeRequirements(root string, mods []*modInfo, version string) error {
	for _, m := range mods {
		for _, s := range m.Siblings {
			if err := m.File.AddRequire(s, version); err != nil {
				return fmt.Errorf("%s/go.mod: %w", m.Dir, err)
			}
		}
		m.File.Cleanup()
		data, err := m.File.Format()
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(root, filepath.FromSlash(path.Join(m.Dir, "go.mod"))), data, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// writeWork moves go.work's replace lines of the siblings from version
// old to version.
func writeWork(root, old, version string) error {
	w, err := readWork(root)
	if err != nil {
		return err
	}
	type line struct{ path, dir, dirVersion string }
	var moved []line // copied out first: DropReplace clears the Replace it drops
	for _, r := range w.Replace {
		if isSibling(r.Old.Path) && r.Old.Version == old {
			moved = append(moved, line{r.Old.Path, r.New.Path, r.New.Version})
		}
	}
	for _, r := range moved {
		if err := w.DropReplace(r.path, old); err != nil {
			return err
		}
		if err := w.AddReplace(r.path, version, r.dir, r.dirVersion); err != nil {
			return err
		}
	}
	w.Cleanup()
	return os.WriteFile(filepath.Join(root, "go.work"), modfile.Format(w.Syntax), 0o644)
}

// writeSums replaces the siblings' lines of every go.sum by their hashes at
// version. The modules are in dependency order, and a module's zip holds
// its go.sum: its siblings are hashed after their own go.sum is written.
func writeSums(root string, mods []*modInfo, version string) error {
	lines := map[string][]string{}
	for _, m := range mods {
		file := filepath.Join(root, filepath.FromSlash(path.Join(m.Dir, "go.sum")))
		data, err := os.ReadFile(file)
		if err != nil && !os.IsNotExist(err) {
			return err
		}
		var ours []string
		for _, s := range m.Siblings {
			ours = append(ours, lines[s]...)
		}
		slices.Sort(ours) // one version: the paths decide
		// The other lines keep the go command's order; ours go where it
		// would put them, before the first module path above theirs.
		var sum []string
		for _, l := range strings.Split(string(data), "\n") {
			if l == "" || isSibling(strings.Fields(l)[0]) {
				continue
			}
			if ours != nil && strings.Fields(l)[0] > prefix {
				sum, ours = append(sum, ours...), nil
			}
			sum = append(sum, l)
		}
		sum = append(sum, ours...)
		if len(sum) > 0 {
			if err := os.WriteFile(file, []byte(strings.Join(sum, "\n")+"\n"), 0o644); err != nil {
				return err
			}
		}
		if lines[m.Path], err = sumLines(root, m, version); err != nil {
			return fmt.Errorf("module %s: %w", m.Path, err)
		}
	}
	return nil
}
