package main

import (
	"bytes"
	"fmt"
	"os/exec"
	"slices"
	"strings"
)

// git runs git in root and returns its standard output; an error carries
// what git wrote to its standard error.
func git(root string, args ...string) (string, error) {
	cmd := exec.Command("git", args...)
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("git %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return string(out), nil
}

// releaseFiles lists, slash-separated and relative to root, the files a
// commit of the tree would hold after `git add -A`: the tracked ones that
// still exist and the untracked ones that are not ignored.
func releaseFiles(root string) ([]string, error) {
	out, err := git(root, "ls-files", "-z", "--cached", "--others", "--exclude-standard", "--deduplicate")
	if err != nil {
		return nil, err
	}
	deleted, err := git(root, "ls-files", "-z", "--deleted")
	if err != nil {
		return nil, err
	}
	gone := strings.Split(deleted, "\x00")
	var files []string
	for _, f := range strings.Split(out, "\x00") {
		if f != "" && !slices.Contains(gone, f) {
			files = append(files, f)
		}
	}
	slices.Sort(files)
	return files, nil
}

// clean fails if the tree has changes or untracked files that are not
// ignored: a release is made of a commit, all of it.
func clean(root string) error {
	out, err := git(root, "status", "--porcelain")
	if err != nil {
		return err
	}
	if s := strings.TrimSpace(out); s != "" {
		return fmt.Errorf("the tree has changes; commit them (or remove them) first:\n%s", s)
	}
	return nil
}
