package mesh_test

import (
	"fmt"
	"testing"
	"testing/synctest"
	"time"
	"runtime"
)

var wall0 = time.Now()

func TestProbeSim(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newSimGroup(t, simOptions{minLatency: 10 * time.Millisecond, maxLatency: 50 * time.Millisecond, linkBits: 20_000_000})
		t0 := time.Now()
		for i := range 100 {
			g.add(fmt.Sprintf("m%d", i))
		}
		t.Logf("started fake %v", time.Since(t0))
		waitPeers(t, 3, g.ms...)
		t.Logf("peers after %v", time.Since(t0))
		time.Sleep(10*time.Second)
		var pc []int
		for _, mb := range g.ms { pc = append(pc, mb.m.PeerCount()) }
		t.Logf("peercounts after 10s %v", pc)
		var keys []string
		for i := range 10 {
			keys = append(keys, g.ms[i*7%len(g.ms)].remember(fmt.Sprintf("hello %d", i), nil, ""))
		}
		for _, mb := range g.ms {
			eventually(t, 30*time.Second, "has", func() bool { for _, k := range keys { if !mb.has(k) {return false} }; return true })
		}
		t.Logf("delivered after %v", time.Since(t0))
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		t.Logf("heap %d MB, goroutines %d", ms.HeapInuse>>20, runtime.NumGoroutine())
		t.Cleanup(func() { println("closing", time.Since(wall0).String()) })
	})
	println("closed", time.Since(wall0).String())
}
