// Package events fans the node's events out to local listeners. A listener
// that stops reading never blocks the node: its bounded queue fills, it is
// dropped, and the drop is counted.
package events

import (
	"sync"
	"sync/atomic"
)

// Names of the events the local socket pushes.
const (
	CMBAccepted = "cmb-accepted"
	PeerJoined  = "peer-joined"
	PeerLeft    = "peer-left"
	// SyncProgress is pushed about once a second while a catch-up runs,
	// and once more when it ends (syncing false).
	SyncProgress = "sync-progress"
)

// Event is one pushed event.
type Event struct {
	Name string `json:"event"`
	Data any    `json:"data"`
}

// Bus delivers each published event to every current subscriber.
type Bus struct {
	mu      sync.Mutex
	subs    map[*Sub]struct{}
	dropped atomic.Int64
}

// NewBus returns an empty bus.
func NewBus() *Bus { return &Bus{subs: map[*Sub]struct{}{}} }

// Sub is one subscription. Read events from C; Done is closed when the bus
// dropped the subscriber for falling behind or Close was called.
type Sub struct {
	C    <-chan Event
	c    chan Event
	done chan struct{}
	once sync.Once
	bus  *Bus
	// Overflowed is set when the subscriber was dropped for not keeping up.
	Overflowed atomic.Bool
}

// Subscribe registers a subscriber with a queue of size n (at least 1).
func (b *Bus) Subscribe(n int) *Sub {
	if n < 1 {
		n = 1
	}
	c := make(chan Event, n)
	s := &Sub{C: c, c: c, done: make(chan struct{}), bus: b}
	b.mu.Lock()
	b.subs[s] = struct{}{}
	b.mu.Unlock()
	return s
}

// Done is closed once the subscription has ended.
func (s *Sub) Done() <-chan struct{} { return s.done }

// Close ends the subscription.
func (s *Sub) Close() {
	s.bus.mu.Lock()
	delete(s.bus.subs, s)
	s.bus.mu.Unlock()
	s.once.Do(func() { close(s.done) })
}

// Publish offers e to every subscriber without blocking; a subscriber whose
// queue is full is dropped.
func (b *Bus) Publish(e Event) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.publishLocked(e)
}

// PublishFunc is Publish of an event named name whose data is made by
// data, called only if there is a subscriber: a node receiving thousands
// of records a second builds no event nobody is there to read.
func (b *Bus) PublishFunc(name string, data func() any) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.subs) > 0 {
		b.publishLocked(Event{Name: name, Data: data()})
	}
}

func (b *Bus) publishLocked(e Event) {
	for s := range b.subs {
		select {
		case s.c <- e:
		default:
			delete(b.subs, s)
			s.Overflowed.Store(true)
			b.dropped.Add(1)
			s.once.Do(func() { close(s.done) })
		}
	}
}

// Dropped counts subscribers dropped for not keeping up.
func (b *Bus) Dropped() int64 { return b.dropped.Load() }

// Subscribers counts current subscribers.
func (b *Bus) Subscribers() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.subs)
}
