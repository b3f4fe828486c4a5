package mesh

import (
	"math"
	"testing"
	"time"
)

// The invalid-delivery counter decays as invalidDecay says at the
// scorer's interval, whatever that is: it halves every 90 s and is down to
// scoreDecayToZero after invalidDecay.
func TestInvalidDeliveriesDecayAtTheScoreInterval(t *testing.T) {
	f := topicScoreParams().InvalidMessageDeliveriesDecay
	after := func(d time.Duration) float64 { return math.Pow(f, float64(d/scoreInterval)) }
	if got := after(90 * time.Second); math.Abs(got-0.5) > 0.01 {
		t.Errorf("after 90 s the count is ×%.3f, want ×0.5", got)
	}
	if got := after(invalidDecay); math.Abs(got-scoreDecayToZero) > 1e-9 {
		t.Errorf("after %v the count is ×%.4f, want ×%v", invalidDecay, got, scoreDecayToZero)
	}
}
