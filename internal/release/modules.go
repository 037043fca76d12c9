package main

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/mod/modfile"
)

// prefix is the path of the root module; the others are below it.
const prefix = "github.com/idemgo/idem"

// modInfo is a module of the repository.
type modInfo struct {
	Path      string // module path
	Dir       string // its directory, slash-separated, relative to the root ("." for the root)
	Published bool   // tagged and served; not a "// Not published:" module
	File      *modfile.File
	Siblings  []string // the paths of the repository's modules it requires
}

func isSibling(p string) bool { return p == prefix || strings.HasPrefix(p, prefix+"/") }

// readModules reads every go.mod among the files a commit of the tree
// would hold (releaseFiles), testdata aside, in dependency order: a module
// comes after the siblings it requires.
func readModules(root string) ([]*modInfo, error) {
	files, err := releaseFiles(root)
	if err != nil {
		return nil, err
	}
	var mods []*modInfo
	for _, f := range files {
		if path.Base(f) != "go.mod" || slices.Contains(strings.Split(f, "/"), "testdata") {
			continue
		}
		data, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(f)))
		if err != nil {
			return nil, err
		}
		mf, err := modfile.Parse(f, data, nil)
		if err != nil {
			return nil, err
		}
		if mf.Module == nil {
			return nil, fmt.Errorf("%s: no module line", f)
		}
		m := &modInfo{Path: mf.Module.Mod.Path, Dir: path.Dir(f), File: mf, Published: true}
		for _, c := range mf.Module.Syntax.Before {
			if strings.HasPrefix(c.Token, "// Not published:") {
				m.Published = false
			}
		}
		for _, r := range mf.Require {
			if isSibling(r.Mod.Path) {
				m.Siblings = append(m.Siblings, r.Mod.Path)
			}
		}
		mods = append(mods, m)
	}
	return inDependencyOrder(mods)
}

// inDependencyOrder sorts mods so that each comes after the siblings it
// requires (by path, among those ready).
func inDependencyOrder(mods []*modInfo) ([]*modInfo, error) {
	byPath := map[string]*modInfo{}
	for _, m := range mods {
		byPath[m.Path] = m
	}
	var out []*modInfo
	done := map[string]bool{}
	for len(out) < len(mods) {
		var ready []*modInfo
		for _, m := range mods {
			if done[m.Path] {
				continue
			}
			ok := true
			for _, s := range m.Siblings {
				if byPath[s] == nil {
					return nil, fmt.Errorf("%s/go.mod requires %s, which is not a module of this repository", m.Dir, s)
				}
				ok = ok && done[s]
			}
			if ok {
				ready = append(ready, m)
			}
		}
		if len(ready) == 0 {
			return nil, fmt.Errorf("the modules require each other in a cycle")
		}
		slices.SortFunc(ready, func(a, b *modInfo) int { return strings.Compare(a.Path, b.Path) })
		for _, m := range ready {
			done[m.Path] = true
		}
		out = append(out, ready...)
	}
	return out, nil
}

// inStep checks that the modules can be released together and returns the
// version at which they require each other ("" if none requires another):
// no go.mod has a replace directive, every requirement of a sibling names
// one version, and go.work uses every module and maps that version of each
// required sibling to its directory.
func inStep(root string, mods []*modInfo) (string, error) {
	var problems []string
	version := ""
	dirOf := map[string]string{}
	for _, m := range mods {
		dirOf[m.Path] = m.Dir
		for _, r := range m.File.Replace {
			problems = append(problems, fmt.Sprintf("%s/go.mod replaces %s (a published go.mod must not; go.work is for development)", m.Dir, r.Old.Path))
		}
		for _, r := range m.File.Require {
			if !isSibling(r.Mod.Path) {
				continue
			}
			if version == "" {
				version = r.Mod.Version
			} else if r.Mod.Version != version {
				problems = append(problems, fmt.Sprintf("%s/go.mod requires %s %s, others %s", m.Dir, r.Mod.Path, r.Mod.Version, version))
			}
		}
	}
	w, err := readWork(root)
	if err != nil {
		return "", err
	}
	used := map[string]bool{}
	for _, u := range w.Use {
		used[path.Clean(u.Path)] = true
	}
	replaced := map[string]string{}
	for _, r := range w.Replace {
		replaced[r.Old.Path+"@"+r.Old.Version] = path.Clean(r.New.Path)
	}
	for _, m := range mods {
		if !used[m.Dir] {
			problems = append(problems, fmt.Sprintf("go.work does not use %s", m.Dir))
		}
		for _, s := range m.Siblings {
			if got := replaced[s+"@"+version]; got != dirOf[s] {
				problems = append(problems, fmt.Sprintf("go.work maps %s %s to %q, want %q", s, version, got, dirOf[s]))
			}
		}
	}
	if len(problems) > 0 {
		slices.Sort(problems)
		return "", fmt.Errorf("the modules are not in step:\n\t%s", strings.Join(slices.Compact(problems), "\n\t"))
	}
	return version, nil
}

func readWork(root string) (*modfile.WorkFile, error) {
	data, err := os.ReadFile(filepath.Join(root, "go.work"))
	if err != nil {
		return nil, err
	}
	return modfile.ParseWork("go.work", data, nil)
}
