// Not published: the tool that prepares a release and checks it (scripts/release.sh, scripts/release-check.sh).
module github.com/idemgo/idem/internal/release

go 1.26.8

require golang.org/x/mod v0.43.0
