package store

import "time"

// testHooks are the switches tests use to drive a store into states that a
// run reaches only by a crash or by chance. Only _test.go files set
// Options.hooks; every other store gets a zero testHooks from Open, and a
// zero field changes nothing. Tests may change a field after Open, before
// the writes it is to affect.
type testHooks struct {
	// walLimit, if positive, replaces walCheckpoint: the frame bytes after
	// which a checkpoint starts a new segment.
	walLimit int64
	// lostBadgerWrites makes the leader log and acknowledge batches without
	// applying them to badger, which is how a power loss that took
	// badger's unsynced pages leaves them: replay must restore them.
	lostBadgerWrites bool
	// checkpointing, if set, is called as a checkpoint starts.
	checkpointing func()
	// compactStep, if set, is called after each step of compactSegments
	// with the step and the segment; an error stops the compaction there.
	compactStep func(step compactStep, seg uint32) error
	// compactQuiet and compactCheck, if positive, replace those constants
	// (compactors.go); set before Open.
	compactQuiet, compactCheck time.Duration
}

func (h *testHooks) checkpointBytes() int64 {
	if h.walLimit > 0 {
		return h.walLimit
	}
	return walCheckpoint
}
