//go:build !race

package fastpath_test

// raceDetector: see race_on_test.go.
const raceDetector = false
