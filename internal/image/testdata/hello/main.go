// Command hello stands in for the nodelocaldns binary in internal/image's tests: a small static executable
// that prints its arguments, so the tests can run it from an extracted layer.
package main

import (
	"fmt"
	"os"
)

func main() { fmt.Println("hello", os.Args[1:]) }
