package p2p

import "time"

// Workers: the requests of sessions run on goroutines that take the next
// request when done with one, rather than on a goroutine a request. A new
// goroutine starts with a small stack and grows it as a request goes down
// its handler's calls, copying it at each doubling: for a write forwarded
// to the directory (HTTP, JSON, the log) some 20 µs a request, a third of
// what serving it cost the leader. A worker keeps the stack it grew (the
// garbage collector halves an idle one at most once a cycle).
const workerIdle = 10 * time.Second

// run runs job on an idle worker, or on a new one when none is idle. A
// worker waits for another job for workerIdle, or until the host closes.
func (h *Host) run(job func()) {
	select {
	case h.jobs <- job:
	default:
		h.goroutine(func() { h.work(job) })
	}
}

// work runs job, then the jobs it is handed while any come within
// workerIdle of the last.
func (h *Host) work(job func()) {
	idle := time.NewTimer(workerIdle)
	defer idle.Stop()
	for {
		job()
		idle.Reset(workerIdle)
		select {
		case job = <-h.jobs:
		case <-idle.C:
			return
		case <-h.ctx.Done():
			return
		}
	}
}
