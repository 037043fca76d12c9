package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/mod/module"
)

// buildProxy writes, under dir, every published module at version in the
// layout of a module proxy (GOPROXY=file://dir): @v/list, @v/VERSION.info,
// .mod and .zip, from the tree's release files. The tree must be prepared
// for version (its modules require each other at it).
func buildProxy(root, version, dir string) error {
	if err := checkVersion(version); err != nil {
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
	if cur != "" && cur != version {
		return fmt.Errorf("the modules require each other at %s, not %s: prepare the tree for %s first", cur, version, version)
	}
	stamp := time.Now().UTC()
	if out, err := git(root, "log", "-1", "--format=%cI"); err == nil {
		if t, err := time.Parse(time.RFC3339, strings.TrimSpace(out)); err == nil {
			stamp = t.UTC()
		}
	}
	info, err := json.Marshal(struct {
		Version string
		Time    time.Time
	}{version, stamp})
	if err != nil {
		return err
	}
	for _, m := range mods {
		if !m.Published {
			continue
		}
		esc, err := module.EscapePath(m.Path)
		if err != nil {
			return err
		}
		vdir := filepath.Join(dir, filepath.FromSlash(esc), "@v")
		if err := os.MkdirAll(vdir, 0o755); err != nil {
			return err
		}
		gomod, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(path.Join(m.Dir, "go.mod"))))
		if err != nil {
			return err
		}
		z, err := moduleZip(root, m, version)
		if err != nil {
			return fmt.Errorf("module %s: %w", m.Path, err)
		}
		for name, data := range map[string][]byte{
			"list": []byte(version + "\n"), version + ".info": info, version + ".mod": gomod, version + ".zip": z,
		} {
			if err := os.WriteFile(filepath.Join(vdir, name), data, 0o644); err != nil {
				return err
			}
		}
		fmt.Printf("%s %s: %d bytes\n", m.Path, version, len(z))
	}
	return nil
}
