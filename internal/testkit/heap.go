package testkit

import "runtime"

// HeapInUse is the heap in use after a collection: what a test that
// bounds the memory a structure holds measures before and after it.
func HeapInUse() int64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapInuse)
}
