package events

import "testing"

func TestSlowSubscriberIsDroppedOthersKeepReceiving(t *testing.T) {
	b := NewBus()
	slow := b.Subscribe(2)
	fast := b.Subscribe(100)
	for i := 0; i < 10; i++ {
		b.Publish(Event{Name: CMBAccepted, Data: i})
		<-fast.C
	}
	select {
	case <-slow.Done():
	default:
		t.Fatal("slow subscriber not dropped")
	}
	if !slow.Overflowed.Load() || b.Dropped() != 1 || b.Subscribers() != 1 {
		t.Fatalf("overflow %v dropped %d subs %d", slow.Overflowed.Load(), b.Dropped(), b.Subscribers())
	}
	if len(slow.C) != 2 {
		t.Fatalf("slow queue holds %d, want the 2 it could take", len(slow.C))
	}
	fast.Close()
	fast.Close() // idempotent
	if b.Subscribers() != 0 {
		t.Fatal("closed subscriber still registered")
	}
}

func TestPublishFuncBuildsOnlyForSubscribers(t *testing.T) {
	b := NewBus()
	built := 0
	data := func() any { built++; return built }
	b.PublishFunc(CMBAccepted, data)
	if built != 0 {
		t.Fatalf("data built %d times with nobody subscribed", built)
	}
	s1, s2 := b.Subscribe(4), b.Subscribe(4)
	b.PublishFunc(CMBAccepted, data)
	if built != 1 {
		t.Fatalf("data built %d times for two subscribers, want once", built)
	}
	for _, s := range []*Sub{s1, s2} {
		if e := <-s.C; e.Name != CMBAccepted || e.Data != 1 {
			t.Fatalf("got %+v", e)
		}
	}
}
