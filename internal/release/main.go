// Command release prepares a release of every module of this repository at
// one version, and builds a module proxy of them to check it without
// publishing anything. scripts/release.sh and scripts/release-check.sh call
// it; run from the repository's root:
//
//	go run ./internal/release check
//	go run ./internal/release prepare VERSION
//	go run ./internal/release proxy VERSION DIR
//	go run ./internal/release list
//
// check: the modules are in step (every module requires its siblings at one
// version, no go.mod has a replace, go.work maps that version of each
// sibling to its directory).
//
// prepare: refuses a tree with changes, modules out of step, a VERSION that
// is not above the current one or whose tags exist; then makes every module
// require its siblings at VERSION, writes their go.sum lines (the hashes of
// the siblings' module zips, made from the files the release commit will
// hold, in dependency order: a module's zip holds its go.sum), moves go.work's
// lines to VERSION, records the source commit for `idem version`
// (cmd/idem/release_commit.txt), commits "Release VERSION" and tags every
// published module (VERSION, pgledger/VERSION, ...) in dependency order.
// It pushes nothing; it prints the command that does.
//
// proxy: writes DIR/<module>/@v/{list,VERSION.info,VERSION.mod,VERSION.zip}
// for every published module, from the working tree's files (tracked and
// untracked, not ignored), the layout GOPROXY=file://DIR serves.
//
// list: prints DIR=PATH of every published module, in dependency order.
//
// A module is published unless the line above the module line of its go.mod
// says "// Not published: ..." (bench, test modules, this tool).
package main

import (
	"fmt"
	"os"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "release:", err)
		os.Exit(1)
	}
}

const usage = "usage: release check | prepare VERSION | proxy VERSION DIR | list"

func run(args []string) error {
	if len(args) == 0 {
		return fmt.Errorf("%s", usage)
	}
	root, err := os.Getwd()
	if err != nil {
		return err
	}
	switch {
	case args[0] == "check" && len(args) == 1:
		mods, err := readModules(root)
		if err != nil {
			return err
		}
		v, err := inStep(root, mods)
		if err != nil {
			return err
		}
		fmt.Printf("%d modules in step at %s\n", len(mods), v)
		return nil
	case args[0] == "list" && len(args) == 1:
		mods, err := readModules(root)
		if err != nil {
			return err
		}
		for _, m := range mods {
			if m.Published {
				fmt.Printf("%s=%s\n", m.Dir, m.Path)
			}
		}
		return nil
	case args[0] == "prepare" && len(args) == 2:
		return prepare(root, args[1])
	case args[0] == "proxy" && len(args) == 3:
		return buildProxy(root, args[1], args[2])
	}
	return fmt.Errorf("%s", usage)
}
