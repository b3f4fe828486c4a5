package mesh

import (
	"maps"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	"golang.org/x/time/rate"
)

// Peer-info dial budgets. A peer-info entry is the advertiser's word: the
// peer it names may not exist and its addresses may be any port the
// advertiser wants connected to, so every dial on that word is rationed.
// Budgets are kept per advertiser PeerID, not per session, so opening
// sessions or reconnecting buys no more; and a budget for the whole mesh
// bounds what many advertisers get together. A peer that completed a
// handshake in our group before (it is in the peerstore) is a member:
// dialling it again is what peer-info is for. A peer never admitted here
// is a stranger, and strangers get a few dials a window, never a frame's
// worth. Each window a budget refills; what exceeds it is dropped, not
// queued: honest peers send peer-info again on every new session.
const (
	peerInfoWindow           = time.Minute
	peerInfoMembers          = 16 // members dialled per advertiser per window
	peerInfoStrangers        = 4  // strangers dialled per advertiser per window
	peerInfoMembersTotal     = 64 // members dialled per window, all advertisers
	peerInfoStrangersTotal   = 16 // strangers dialled per window, all advertisers
	peerInfoAdvertisersLimit = 1024
)

// The bounds a refused peer-info dial is counted under (Stats.PeerInfoDialsLimited).
const (
	boundAdvertiserMembers   = "advertiser-members"
	boundAdvertiserStrangers = "advertiser-strangers"
	boundTotalMembers        = "total-members"
	boundTotalStrangers      = "total-strangers"
	boundSlots               = "slots"
	boundAdvertisers         = "advertisers"
	boundTarget              = "target" // PeerTarget members connected or being dialled
)

// dialBudget rations peer-info dials per advertiser and in total, for
// members and strangers apart (index 0 and 1).
type dialBudget struct {
	mu    sync.Mutex
	total [2]*rate.Limiter
	per   map[peer.ID]*[2]*rate.Limiter
	// refused counts the dials each bound refused.
	refused map[string]int64
}

func newDialBudget() *dialBudget {
	return &dialBudget{
		total:   [2]*rate.Limiter{perWindow(peerInfoMembersTotal), perWindow(peerInfoStrangersTotal)},
		per:     map[peer.ID]*[2]*rate.Limiter{},
		refused: map[string]int64{},
	}
}

func perWindow(n int) *rate.Limiter {
	return rate.NewLimiter(rate.Every(peerInfoWindow/time.Duration(n)), n)
}

// take spends one dial of a member (stranger false) or a stranger that
// adv advertised, from adv's budget and the total alike, or from neither:
// it returns "" when the dial may go ahead, else the bound that refused it.
func (b *dialBudget) take(adv peer.ID, stranger bool, now time.Time) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	bound := b.spend(adv, stranger, now)
	if bound != "" {
		b.refused[bound]++
	}
	return bound
}

// refuse counts a dial refused by a bound outside the budget.
func (b *dialBudget) refuse(bound string) {
	b.mu.Lock()
	b.refused[bound]++
	b.mu.Unlock()
}

// snapshot is how many dials each bound refused.
func (b *dialBudget) snapshot() map[string]int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return maps.Clone(b.refused)
}

// spend is take without the counting; b.mu held.
func (b *dialBudget) spend(adv peer.ID, stranger bool, now time.Time) string {
	c := 0
	if stranger {
		c = 1
	}
	lims, ok := b.per[adv]
	if !ok {
		if len(b.per) >= peerInfoAdvertisersLimit {
			b.pruneFull(now)
		}
		if len(b.per) >= peerInfoAdvertisersLimit {
			// Dropping a budget in use would hand its advertiser a fresh
			// one; refusing costs an honest advertiser one frame.
			return boundAdvertisers
		}
		lims = &[2]*rate.Limiter{perWindow(peerInfoMembers), perWindow(peerInfoStrangers)}
		b.per[adv] = lims
	}
	mine := lims[c].ReserveN(now, 1)
	if mine.DelayFrom(now) > 0 {
		mine.CancelAt(now)
		return [2]string{boundAdvertiserMembers, boundAdvertiserStrangers}[c]
	}
	all := b.total[c].ReserveN(now, 1)
	if all.DelayFrom(now) > 0 {
		all.CancelAt(now)
		mine.CancelAt(now)
		return [2]string{boundTotalMembers, boundTotalStrangers}[c]
	}
	return ""
}

// pruneFull forgets advertisers whose budgets are full again: forgetting
// them gives nothing back. b.mu held.
func (b *dialBudget) pruneFull(now time.Time) {
	for id, l := range b.per {
		if l[0].TokensAt(now) >= float64(l[0].Burst()) && l[1].TokensAt(now) >= float64(l[1].Burst()) {
			delete(b.per, id)
		}
	}
}
