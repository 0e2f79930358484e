// Package archtest holds no code, only tests: that the import graph drawn in docs/architecture.md is the one
// the Go files have, so the page cannot drift from the house, and that the house drawn in docs/pictures.md
// has every package on a floor above everything it imports; and that no package under internal/ keeps a
// process-wide registry, logger redirection or setting of its own (globals_test.go).
//
// May touch: the repository's files, read-only (docs/architecture.md rewritten with -update).
package archtest
