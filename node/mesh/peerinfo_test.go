package mesh

import (
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
)

// The budgets: strangers and members apart, per advertiser and in total,
// refilled over the window, and a refused dial spends nothing.
func TestDialBudget(t *testing.T) {
	b := newDialBudget()
	now := time.Now()
	adv := func(i int) peer.ID { return peer.ID(rune('a' + i)) }
	for i := range peerInfoStrangers {
		if bound := b.take(adv(0), true, now); bound != "" {
			t.Fatalf("stranger %d refused by %s", i, bound)
		}
	}
	if bound := b.take(adv(0), true, now); bound != boundAdvertiserStrangers {
		t.Fatalf("stranger beyond the advertiser's budget: %q", bound)
	}
	for i := range peerInfoMembers {
		if bound := b.take(adv(0), false, now); bound != "" {
			t.Fatalf("member %d refused by %s after the strangers' budget ran out", i, bound)
		}
	}
	if bound := b.take(adv(0), false, now); bound != boundAdvertiserMembers {
		t.Fatalf("member beyond the advertiser's budget: %q", bound)
	}
	// Other advertisers share the mesh's strangers budget: 16 in all.
	took := peerInfoStrangers
	for i := 1; took < peerInfoStrangersTotal; i++ {
		for range peerInfoStrangers {
			if bound := b.take(adv(i), true, now); bound != "" {
				t.Fatalf("stranger %d refused by %s", took, bound)
			}
			took++
		}
	}
	if bound := b.take(adv(9), true, now); bound != boundTotalStrangers {
		t.Fatalf("stranger beyond the mesh's budget: %q", bound)
	}
	// adv(9) was refused by the total: its own budget is untouched.
	later := now.Add(peerInfoWindow)
	for i := range peerInfoStrangers {
		if bound := b.take(adv(9), true, later); bound != "" {
			t.Fatalf("a window later, stranger %d refused by %s", i, bound)
		}
	}
	got := b.snapshot()
	if got[boundAdvertiserStrangers] != 1 || got[boundAdvertiserMembers] != 1 || got[boundTotalStrangers] != 1 {
		t.Errorf("refusals counted %v", got)
	}
}
