package ipc

import (
	"container/heap"
	"sync"
	"time"
)

// sched runs the socket's request handlers on a fixed set of workers, in
// an order fair between connections, so a flood on some connections does
// not make another wait behind it: start-time fair queueing, where a job's
// cost is the time it ran. A connection that becomes busy after being
// idle starts at the current virtual time, forgiven what it was served
// before: a client that asks one thing at a time and waits for the answer
// goes next, not behind every flooder that has had less (key). A
// connection with more
// replies waiting than its allowance (it does not read them) is parked:
// its jobs wait until the client reads.
//
// Invariant: a connection is in the heap exactly when it has queued jobs
// and is not parked (q.idx >= 0). At most n jobs run at once (busy),
// whether on a worker or on the caller of runIdle.
type sched struct {
	mu      sync.Mutex
	ready   schedHeap
	vnow    time.Duration
	work    *sync.Cond
	n, busy int
	stopped bool
	wg      sync.WaitGroup
}

// fairQ is a connection's place in the scheduler; guarded by sched.mu.
type fairQ struct {
	c       *conn
	jobs    []func()
	vstart  time.Duration // virtual start of its next job
	avg     time.Duration // its jobs' typical cost, charged at dispatch
	idx     int           // in the heap, or -1
	parked  bool
	running int // its jobs on workers now
}

// key orders the connections with work: by virtual start, behind by the
// expected cost of the jobs a connection keeps waiting after its next.
// Fair queueing alone would have a client with one request wait behind
// the next job of every flooding client; charged for its queue up front,
// a flooder goes after the client that asks one thing at a time. The
// client that waits for each answer is not starved in turn: idle between
// requests, it starts each at the virtual time of the jobs being served.
func (q *fairQ) key() time.Duration {
	return q.vstart + time.Duration(max(len(q.jobs)-1, 0))*q.cost()
}

func (q *fairQ) cost() time.Duration { return max(q.avg, 50*time.Microsecond) }

func newSched(workers int) *sched {
	s := &sched{n: workers}
	s.work = sync.NewCond(&s.mu)
	for range workers {
		s.wg.Go(s.worker)
	}
	return s
}

// submit queues job for c.
func (s *sched) submit(q *fairQ, job func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(q.jobs) == 0 && q.running == 0 && q.idx < 0 && !q.parked {
		// Idle until now: it starts from where the others are, with at
		// most one job of its own as debt. Without the cap a client that
		// waits for each answer would carry the wall time of its last
		// request (long under load) and wait behind every flooder that
		// had less; with no debt at all, a flooder fed one request at a
		// time (its reader held back) would be as fresh as it.
		q.vstart = min(max(q.vstart, s.vnow), s.vnow+q.cost())
	}
	q.jobs = append(q.jobs, job)
	// Every job queued wakes a worker: a connection's jobs run side by
	// side, each on a worker of its own, when workers are free.
	switch {
	case q.idx >= 0:
		heap.Fix(&s.ready, q.idx)
		s.work.Signal()
	case !q.parked:
		heap.Push(&s.ready, q)
		s.work.Signal()
	}
}

// unpark lets a parked connection's jobs run again once it holds less
// than its allowance.
func (s *sched) unpark(q *fairQ) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !q.parked {
		return
	}
	q.parked = false
	if len(q.jobs) > 0 && q.idx < 0 {
		q.vstart = max(q.vstart, s.vnow)
		heap.Push(&s.ready, q)
		s.work.Signal()
	}
}

// take removes and returns the jobs c has queued (c is gone: its caller
// runs them at once, each finding the connection dead).
func (s *sched) take(q *fairQ) []func() {
	s.mu.Lock()
	defer s.mu.Unlock()
	jobs := q.jobs
	q.jobs, q.parked = nil, false
	if q.idx >= 0 {
		heap.Remove(&s.ready, q.idx)
	}
	return jobs
}

func (s *sched) worker() {
	s.mu.Lock()
	for {
		for (len(s.ready) == 0 || s.busy >= s.n) && !s.stopped {
			s.work.Wait()
		}
		if s.stopped {
			s.mu.Unlock()
			return
		}
		q := heap.Pop(&s.ready).(*fairQ)
		if q.c.repliesWait() && q.c.ctx.Err() == nil {
			// Its replies are not being read: run nothing more for it
			// until they are (unpark), or it is dropped.
			q.parked = true
			continue
		}
		job := q.jobs[0]
		q.jobs[0] = nil
		q.jobs = q.jobs[1:]
		if len(q.jobs) > 0 {
			heap.Push(&s.ready, q)
			s.work.Signal()
		}
		s.runLocked(q, job)
	}
}

// runIdle runs job for q on the caller's goroutine, and reports true, when
// it would go to a worker at once: q has nothing queued or running and is
// not parked, no other connection waits, and a worker's place is free. It
// is charged and counted as a worker's job. Handed to a worker instead,
// the job would cost a goroutine wake-up, while its caller waits for its
// next message anyway; and when the other P is idle, the runtime wakes a
// thread to spin for it (wakep), unless the job's own next hand-off (the
// store's, if its commit is not made on the caller) would wake one anyway.
func (s *sched) runIdle(q *fairQ, job func()) bool {
	s.mu.Lock()
	if s.stopped || len(s.ready) > 0 || s.busy >= s.n || len(q.jobs) > 0 || q.running > 0 || q.parked || q.idx >= 0 || q.c.repliesWait() {
		s.mu.Unlock()
		return false
	}
	q.vstart = min(max(q.vstart, s.vnow), s.vnow+q.cost()) // as submit starts an idle connection
	s.runLocked(q, job)
	if len(s.ready) > 0 {
		s.work.Signal() // a worker may wait for the place this job held
	}
	s.mu.Unlock()
	return true
}

// runLocked runs q's next job, called and returning with s.mu held, which
// it lets go while the job runs.
func (s *sched) runLocked(q *fairQ, job func()) {
	s.vnow = q.vstart
	q.running++
	s.busy++
	charged := q.cost()
	q.vstart += charged
	s.mu.Unlock()
	t0 := time.Now()
	job()
	d := time.Since(t0)
	s.mu.Lock()
	q.avg = (3*q.avg + d) / 4
	q.vstart += d - charged
	q.running--
	s.busy--
	if q.idx >= 0 {
		heap.Fix(&s.ready, q.idx)
	}
}

// stop ends the workers once the jobs queued have run.
func (s *sched) stop() {
	s.mu.Lock()
	s.stopped = true
	s.work.Broadcast()
	s.mu.Unlock()
	s.wg.Wait()
}

type schedHeap []*fairQ

func (h schedHeap) Len() int           { return len(h) }
func (h schedHeap) Less(i, j int) bool { return h[i].key() < h[j].key() }
func (h schedHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].idx, h[j].idx = i, j
}
func (h *schedHeap) Push(x any) {
	q := x.(*fairQ)
	q.idx = len(*h)
	*h = append(*h, q)
}
func (h *schedHeap) Pop() any {
	old := *h
	q := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	q.idx = -1
	return q
}
