//go:build !nldfallbacknext

package nft

// fallbackGeneration is the generation of BuildFallback's rules (fallback_stamp.go): bump it with every change
// to them, so that a table of one version is never rewritten for ever by another.
const fallbackGeneration = 1

// masqueradeCounted is false: the host masquerade rules carry no counter. fallback_generation_next.go, built
// only by test/e2e/lifecycle's TestFallbackGenerationsConverge, stands for a next version that adds one.
const masqueradeCounted = false
