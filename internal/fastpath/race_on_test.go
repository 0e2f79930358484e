//go:build race

package fastpath_test

// raceDetector: the race detector's shadow memory grows the RSS with every goroutine and allocation, so RSS
// figures are not the program's under it.
const raceDetector = true
