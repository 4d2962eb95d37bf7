//go:build !race

package testkit

// Race is whether the test binary was built with -race.
const Race = false
