// Package archtest holds no code, only a test: that the import graph drawn in docs/architecture.md is the one
// the Go files have, so the page cannot drift from the house.
package archtest
