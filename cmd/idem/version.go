package main

import (
	_ "embed"
	"fmt"
	"io"
	"runtime/debug"
	"strings"

	"github.com/spf13/cobra"
)

// commit names the commit of a release binary built with
// -ldflags "-X main.commit=…", for a build whose build info has none (a
// build outside a checkout).
var commit string

// releaseCommit is the commit a release was prepared from, written into
// the release commit by scripts/release.sh (empty between releases): a
// binary installed with go install …@VERSION has the version in its build
// info and no commit.
//
//go:embed release_commit.txt
var releaseCommit string

// newVersionCmd is `idem version`: the version of the module the binary
// was built from (v1.2.3 when installed with go install …@v1.2.3,
// "(devel)" when built in a checkout), the commit and the Go version.
func newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print idem's version, commit and Go version",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			printVersion(c.OutOrStdout())
			return nil
		},
	}
}

// printVersion writes "idem VERSION commit COMMIT GOVERSION": from the
// binary's build info (debug.ReadBuildInfo), the commit from its VCS
// stamp (with "+modified" for a build of a changed tree), else the
// release's -X main.commit, else, for a build of a released version (go
// install …@VERSION, whose build info has no commit), the commit the
// release was prepared from, else "unknown".
func printVersion(w io.Writer) {
	version, rev, modified, goVersion := "unknown", commit, false, "unknown"
	if bi, ok := debug.ReadBuildInfo(); ok {
		version, goVersion = bi.Main.Version, bi.GoVersion
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				modified = s.Value == "true"
			}
		}
	}
	if rev == "" && version != "(devel)" && version != "unknown" {
		rev = strings.TrimSpace(releaseCommit)
	}
	if rev == "" {
		rev = "unknown"
	}
	if modified {
		rev += "+modified"
	}
	fmt.Fprintf(w, "idem %s commit %s %s\n", version, rev, goVersion)
}
