//go:build nldfallbacknext

package nft

// A build of the next generation of the fallback's rules, made only by test/e2e/lifecycle's
// TestFallbackGenerationsConverge (go build -tags nldfallbacknext): one more counter, in the host masquerade
// rules, as a release that changes the rules would. No release is built with this tag.
const (
	fallbackGeneration = 2
	masqueradeCounted  = true
)
