package main

import (
	"bytes"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"

	"golang.org/x/mod/module"
	"golang.org/x/mod/sumdb/dirhash"
	modzip "golang.org/x/mod/zip"
)

// A file of a module's zip, read from the tree.
type treeFile struct {
	name string // in the module, slash-separated
	file string // on disk
}

func (f treeFile) Path() string                 { return f.name }
func (f treeFile) Lstat() (os.FileInfo, error)  { return os.Lstat(f.file) }
func (f treeFile) Open() (io.ReadCloser, error) { return os.Open(f.file) }

// moduleZip returns the zip of module m at version, made as a module proxy
// makes it from a commit holding the tree's release files: every file below
// m.Dir, except those of modules nested in it (golang.org/x/mod/zip omits
// them, and vendored packages).
func moduleZip(root string, m *modInfo, version string) ([]byte, error) {
	files, err := releaseFiles(root)
	if err != nil {
		return nil, err
	}
	var in []modzip.File
	for _, f := range files {
		rel := f
		if m.Dir != "." {
			if !strings.HasPrefix(f, m.Dir+"/") {
				continue
			}
			rel = strings.TrimPrefix(f, m.Dir+"/")
		}
		in = append(in, treeFile{name: rel, file: filepath.Join(root, filepath.FromSlash(f))})
	}
	var buf bytes.Buffer
	if err := modzip.Create(&buf, module.Version{Path: m.Path, Version: version}, in); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// sumLines returns module m's two go.sum lines at version: the hash of its
// zip and of its go.mod, as the go command computes them.
func sumLines(root string, m *modInfo, version string) ([]string, error) {
	z, err := moduleZip(root, m, version)
	if err != nil {
		return nil, err
	}
	tmp, err := os.CreateTemp("", "release-*.zip")
	if err != nil {
		return nil, err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(z); err != nil {
		tmp.Close()
		return nil, err
	}
	if err := tmp.Close(); err != nil {
		return nil, err
	}
	zh, err := dirhash.HashZip(tmp.Name(), dirhash.Hash1)
	if err != nil {
		return nil, err
	}
	gomod := filepath.Join(root, filepath.FromSlash(path.Join(m.Dir, "go.mod")))
	mh, err := dirhash.Hash1([]string{"go.mod"}, func(string) (io.ReadCloser, error) { return os.Open(gomod) })
	if err != nil {
		return nil, err
	}
	return []string{m.Path + " " + version + " " + zh, m.Path + " " + version + "/go.mod " + mh}, nil
}
