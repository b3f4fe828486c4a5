// Package store keeps CMB records, their indexes, the text index and the peer
// roster in badger. It deliberately knows nothing about the wire record type:
// the node layer maps each record onto an Entry and keeps the received bytes
// in Entry.Raw, which the store returns unchanged.
package store

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	badger "github.com/dgraph-io/badger/v4"
	"github.com/dgraph-io/badger/v4/options"
	"github.com/dgraph-io/badger/v4/y"

	"github.com/cmbnode/cmbnode/internal/opt"
)

// NumFields is the number of CAT7 fields a record carries.
const NumFields = 7

// FieldNames lists the seven fields in the order used by Entry.Texts and
// SearchOptions.FieldWeights (the protocol's hash order).
func FieldNames() [NumFields]string {
	return [NumFields]string{"focus", "issue", "intent", "motivation", "commitment", "perspective", "mood"}
}

// Entry is what the node layer hands the store for one record.
type Entry struct {
	Key       string
	CreatedBy string
	CreatedAt int64 // author's Unix time in ms
	Group     string
	To        string
	Parents   []string
	Ancestors []string
	// Texts are the field texts in FieldNames order; they feed the text index.
	Texts [NumFields]string
	// Raw is the record exactly as received; Get returns it byte for byte.
	Raw []byte
}

// Meta is receiver-local bookkeeping that never goes on the wire.
type Meta struct {
	StoredAt  time.Time
	Source    string // peer nodeId, or "local"
	Verified  bool
	Decrypted bool
	Directed  bool
	// Kept exempts the record from age-based purge (e.g. validated/canonical).
	Kept bool
	// Quarantined records are kept but not surfaced (Quarantine).
	Quarantined bool
	// Forgotten records were forgotten here while other held records'
	// lineage named them: kept, hidden, for that lineage (Forget).
	Forgotten bool
}

// Record is a stored entry with its local metadata.
type Record struct {
	Entry
	Meta Meta
}

// Options tunes Open. Open gives every field left zero (or, for the
// numbers, zero or less) its value in DefaultOptions, so the zero value is
// usable.
type Options struct {
	// Home names the node's home directory in errors (default: the parent
	// of the store directory).
	Home string
	// Logger receives badger's warnings and errors; nil discards them.
	Logger *slog.Logger
	// Now is the clock used for StoredAt defaults and age-based purge
	// (default time.Now).
	Now func() time.Time
	// MaxClockSkew is how far a record's createdAt may lie after its
	// arrival (Meta.StoredAt) and still be its time in the time orders, in
	// Search and for retention (default DefaultMaxClockSkew). A record
	// dated further ahead takes its arrival time there instead; its
	// createdAt and bytes are kept and returned as signed.
	MaxClockSkew time.Duration
	// MaxBatch caps how many pending writes share one commit (default 1024).
	MaxBatch int
	// BlockCacheBytes sizes badger's block cache (default 32 MiB).
	BlockCacheBytes int64
	// MemTableBytes sizes each badger memtable (default 16 MiB).
	MemTableBytes int64
	// ValueLogFileBytes sizes badger's value-log files, the unit in which
	// compactValueLog gives space back (default 64 MiB).
	ValueLogFileBytes int64
	// MinFreeBytes is the free space the store keeps on its file system:
	// below it writes are refused with a *DiskFullError, and resume once
	// it is back (default: two memtables and two log growths, 40 MiB).
	MinFreeBytes int64

	// hooks are set only by tests (hooks.go).
	hooks *testHooks
}

// DefaultMaxClockSkew is Options.MaxClockSkew when unset.
const DefaultMaxClockSkew = 5 * time.Minute

// DefaultOptions returns the settings Open uses for the fields left zero.
// Home has no default of its own: it depends on the store directory.
func DefaultOptions() Options {
	return Options{
		Now:               time.Now,
		MaxClockSkew:      DefaultMaxClockSkew,
		MaxBatch:          1024,
		BlockCacheBytes:   8 << 20,
		MemTableBytes:     4 << 20,
		ValueLogFileBytes: 64 << 20,
	}
}

// withDefaults returns o with every unset field set as DefaultOptions (and,
// for Home, the parent of dir) has it.
func (o Options) withDefaults(dir string) Options {
	def := DefaultOptions()
	o.Home = cmp.Or(o.Home, filepath.Dir(filepath.Clean(dir)))
	if o.Now == nil {
		o.Now = def.Now
	}
	opt.Default(&o.MaxClockSkew, def.MaxClockSkew)
	opt.Default(&o.MaxBatch, def.MaxBatch)
	opt.Default(&o.BlockCacheBytes, def.BlockCacheBytes)
	opt.Default(&o.MemTableBytes, def.MemTableBytes)
	opt.Default(&o.ValueLogFileBytes, def.ValueLogFileBytes)
	if o.hooks == nil {
		o.hooks = &testHooks{}
	}
	return o
}

// orderAt is a record's time in the time, group and author orders, in the
// text index (Search's AsOf and recency) and for retention: its createdAt,
// unless that lies more than MaxClockSkew after its arrival, in which case
// its arrival. Ordered by createdAt alone, a record from an author whose
// clock runs ahead would be hidden from recall until that clock's time
// came and would outlive retention by as much. It depends only on what the
// record stores, so every Open and Check computes the same time.
func (s *Store) orderAt(r *Record) int64 {
	if r.Meta.StoredAt.IsZero() {
		return r.CreatedAt
	}
	arrived := r.Meta.StoredAt.UnixMilli()
	if r.CreatedAt-arrived > s.opts.MaxClockSkew.Milliseconds() {
		return arrived
	}
	return r.CreatedAt
}

// Errors returned by Open and the accessors. Open's errors match one of the
// first three with errors.Is, or are a *FormatError, when there is
// something for the user to do about them.
var (
	ErrLocked     = errors.New("store is locked by another process")
	ErrPermission = errors.New("permission denied opening store")
	ErrCorrupted  = errors.New("store is corrupted")
	ErrNotFound   = errors.New("record not found")
	ErrClosed     = errors.New("store is closed")
	ErrInvalid    = errors.New("invalid entry")
)

// LockedError means another process holds the store's lock: most likely a
// cmbnode daemon running with the same home. It matches ErrLocked.
type LockedError struct {
	Dir  string // the store directory
	Home string // the home it belongs to (Options.Home)
	Err  error  // what the lock attempt returned
}

func (e *LockedError) Error() string {
	return fmt.Sprintf("%v: %s (home %s): %v", ErrLocked, e.Dir, e.Home, e.Err)
}

// Is makes errors.Is(err, ErrLocked) match.
func (e *LockedError) Is(target error) bool { return target == ErrLocked }

func (e *LockedError) Unwrap() error { return e.Err }

// formatVersion names the layout this build reads and writes: records in
// the log segments, badger holding a pointer to each. Open refuses a store
// marked with any other format (*FormatError) before it writes anything.
const formatVersion = "cmbnode-store-4"

// formatV3 is the format before: the same but for records written with
// every text in full (codec.go's recFormat1), which this one still reads.
// Opened for writing, a store of it is marked formatVersion, since the
// records written from then on are not readable by its readers.
const formatV3 = "cmbnode-store-3"

// FormatError means the store holds a format other than the one this build
// reads. Older is set when Found is an earlier format of this store (the
// development formats that preceded Want, which no release reads); any
// other marker was written by a newer build or by something that is not
// cmbnode.
type FormatError struct {
	Dir   string
	Found string
	Want  string
	Older bool
}

func (e *FormatError) Error() string {
	return fmt.Sprintf("store %s has format %q, this build reads %q", e.Dir, e.Found, e.Want)
}

// Store is an open store. All methods are safe for concurrent use.
type Store struct {
	db   *badger.DB
	dir  string
	opts Options

	peers peerCache // roster entries as read (GetPeer)

	cm      commitState
	ix      indexState
	closing chan struct{}
	wdone   chan struct{}
	// batchPool holds batches the index is done with (newBatch); donePool
	// the signalled channels of single-job submits (submitJobs).
	batchPool, donePool sync.Pool
	// writeMu is held by the leader around each apply to badger, so Check
	// can observe records and the in-memory index at one instant.
	writeMu sync.Mutex

	// log is written only by the leader of the group commit (and
	// Open/Close); it keeps the records (seglog.go).
	log *segLog
	// failed is set once a log write, sync or badger apply failed.
	failed atomic.Pointer[error]
	// full is the disk-full condition writes were last refused for; nil
	// once a write succeeds (or DiskState sees space back).
	full atomic.Pointer[DiskFullError]
	// readOnly: opened on a disk too full for badger to open for writing,
	// until the writer reopens it writable (reopen.go).
	readOnly atomic.Bool
	// dbMu is held shared by every read of badger on other goroutines than
	// the writer's pipeline, and exclusively while a read-only store swaps
	// db for a writable one: no read runs on a closed badger (reopen.go).
	dbMu sync.RWMutex
	// swapGate is set while a swap waits for dbMu: new reads wait for it
	// to close (rlockDB).
	swapGate atomic.Pointer[chan struct{}]
	// batches/batched measure how well commits are shared.
	batches atomic.Int64
	batched atomic.Int64

	closeOnce sync.Once
	closed    atomic.Bool
	count     atomic.Int64

	idx   *textIndex
	order *orderIndex
	lines *lineIndex
	trust *trustState
	// appliedSeq is the last batch the leader finished with; indexed
	// reaches it once the text index holds that batch's writes too.
	appliedSeq atomic.Uint64
	applied    watermark
	// ackedSeq is the last batch whose callers were told it is durable.
	ackedSeq atomic.Uint64
	indexed  watermark
	// loadedKeys are the stored keys found at Open, handed to the writer.
	loadedKeys map[string]struct{}
	// loadedTexts are the texts of the records found at Open: the indexer
	// builds the text index from them before anything else, so Open does
	// not wait for it; textsLoaded is closed once it has, and every
	// reader of the text index waits for it (waitIndexed).
	loadedTexts []loadedText
	textsLoaded chan struct{}
	// compact pauses badger's compaction workers while nothing is
	// written (compactors.go).
	compact compactGate
}

// loadedText is one record found at Open, for the text index.
type loadedText struct {
	key, group string
	at         int64
	texts      [NumFields]string
}

// Open opens (creating if needed) the store in dir. It refuses a store
// another process holds (*LockedError), one of another format
// (*FormatError) and one it finds damaged (ErrCorrupted); see
// classifyOpenErr.
func Open(dir string, opts Options) (*Store, error) {
	opts = opts.withDefaults(dir)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		if noSpace(err) {
			free, _ := freeBytes(filepath.Dir(dir))
			return nil, &DiskFullError{Path: dir, Free: free, Need: openNeed(dir), Err: err}
		}
		return nil, classifyOpenErr(dir, opts.Home, fmt.Errorf("creating store directory: %w", err))
	}
	// On a disk too full for badger to open for writing (its memory-mapped
	// files would kill the process, not fail), the store opens read-only:
	// everything held can be read, no write is attempted, until there is
	// room again and the writer reopens it writable (reopen.go).
	free, known := freeBytes(dir)
	need := openNeed(dir)
	readOnly := known && free < need

	db, err := badger.Open(badgerOptions(dir, opts, readOnly))
	if err != nil {
		if noSpace(err) {
			free, _ = freeBytes(dir)
			return nil, &DiskFullError{Path: dir, Free: free, Need: need, Err: err}
		}
		return nil, classifyOpenErr(dir, opts.Home, err)
	}
	s := &Store{
		db:          db,
		dir:         dir,
		opts:        opts,
		closing:     make(chan struct{}),
		textsLoaded: make(chan struct{}),
		wdone:       make(chan struct{}),
		idx:         newTextIndex(runtime.Gosched),
		order:       newOrderIndex(),
		lines:       newLineIndex(),
		trust:       newTrustState(),
	}
	s.compact.init()
	s.readOnly.Store(readOnly)
	if readOnly {
		s.full.Store(&DiskFullError{Path: dir, Free: free, Need: need, ReadOnly: true})
	}
	if err := s.checkFormat(); err != nil {
		db.Close()
		return nil, classifyOpenErr(dir, opts.Home, err)
	}
	if err := s.recover(); err != nil {
		db.Close()
		return nil, classifyOpenErr(dir, opts.Home, err)
	}
	if err := s.load(context.Background()); err != nil {
		s.log.close()
		db.Close()
		return nil, classifyOpenErr(dir, opts.Home, fmt.Errorf("loading records: %w", err))
	}
	if err := s.loadSigners(); err != nil {
		s.log.close()
		db.Close()
		return nil, classifyOpenErr(dir, opts.Home, fmt.Errorf("loading signers: %w", err))
	}
	if err := s.loadTombstones(); err != nil {
		s.log.close()
		db.Close()
		return nil, classifyOpenErr(dir, opts.Home, fmt.Errorf("loading tombstones: %w", err))
	}
	s.startWriter()
	go s.governCompactors()
	return s, nil
}

// badgerOptions is how the store runs badger in dir, read-only or not.
func badgerOptions(dir string, opts Options, readOnly bool) badger.Options {
	return badger.DefaultOptions(dir).
		WithReadOnly(readOnly).
		WithLogger(badgerLogger{opts.Logger}).
		// Acknowledged means durable, but not through badger's own syncs
		// (two msyncs per commit: the value log, even with nothing written
		// to it, and the sparse memtable log): every batch is first made
		// durable in the store's write-ahead log (wal.go), and badger is
		// synced only at checkpoints.
		WithSyncWrites(false).
		// Only the leader of the group commit writes, so conflict tracking is wasted work.
		WithDetectConflicts(false).
		// Tables are compressed at every flush and compaction: Snappy
		// costs the least CPU for it. Each table records its compression.
		WithCompression(options.Snappy).
		WithBlockSize(16 << 10).
		WithBlockCacheSize(opts.BlockCacheBytes).
		WithMemTableSize(opts.MemTableBytes).
		WithNumMemtables(2).
		WithNumLevelZeroTables(4).
		WithNumLevelZeroTablesStall(12).
		WithNumCompactors(2).
		// Roster entries go to the value log; record pointers and index
		// keys, all smaller, stay in the tree. Superseded entries' space
		// comes back through compactValueLog.
		WithValueThreshold(valueThreshold).
		WithValueLogFileSize(opts.ValueLogFileBytes).
		WithMetricsEnabled(false)
}

// classifyOpenErr sorts Open's failures by what the caller can do about
// them: another process holding the store (*LockedError), permission
// (ErrPermission), damage found in the data (ErrCorrupted: errors that
// wrap it, and badger's own reports of damaged files, badgerDamage), a
// store of another format (*FormatError, as it is). Anything else (a file
// where the directory should be, too many open files, an I/O error) is
// reported as what it is, its cause kept for errors.Is: it is not damage,
// and moving the data away would not help and could lose it.
func classifyOpenErr(dir, home string, err error) error {
	msg := err.Error()
	var fe *FormatError
	switch {
	case errors.Is(err, syscall.EWOULDBLOCK) || errors.Is(err, syscall.EAGAIN) ||
		strings.Contains(msg, "Cannot acquire directory lock"):
		return &LockedError{Dir: dir, Home: home, Err: err}
	case errors.Is(err, fs.ErrPermission) || strings.Contains(msg, "permission denied"):
		return fmt.Errorf("%w: %s (home %s): %v", ErrPermission, dir, home, err)
	case errors.As(err, &fe):
		return err
	case errors.Is(err, ErrCorrupted):
		return fmt.Errorf("opening %s (home %s): %w", dir, home, err)
	case badgerDamage(err):
		return fmt.Errorf("%w: opening %s (home %s): %w", ErrCorrupted, dir, home, err)
	default:
		return fmt.Errorf("opening store %s (home %s): %w", dir, home, err)
	}
}

// badgerDamage reports whether err is badger (v4) saying that a file of
// its own is damaged or missing. Badger exports sentinels for few of these
// and, outside its debug mode, wraps errors into text (y.Wrap), so they
// are known by their messages too; TestOpenCorruptionFound damages the
// files in the ways that provoke the commonest of them.
func badgerDamage(err error) bool {
	msg := err.Error()
	// This store runs badger without encryption, so a key registry or a
	// value log whose bytes read as keys that do not match is damaged.
	for _, e := range [...]error{y.ErrChecksumMismatch, badger.ErrTruncateNeeded,
		badger.ErrEncryptionKeyMismatch, badger.ErrInvalidDataKeyID} {
		if errors.Is(err, e) || strings.Contains(msg, e.Error()) {
			return true
		}
	}
	for _, m := range [...]string{
		"manifest has bad magic",         // MANIFEST overwritten, or shorter than its header
		"manifest has checksum mismatch", // a MANIFEST entry changed
		"Manifest file might be corrupted",
		"MANIFEST invalid",
		"MANIFEST removes non-existing table",
		"MANIFEST file has invalid manifestChange op",
		"file does not exist for table", // a table the MANIFEST lists is gone
	} {
		if strings.Contains(msg, m) {
			return true
		}
	}
	return false
}

// recover applies again the frames logged since the replay mark (writes
// acknowledged since the last checkpoint, which badger may have lost with
// the page cache), makes badger durable and opens the newest log segment
// for appending after its last whole frame.
func (s *Store) recover() error {
	l := &segLog{dir: s.dir, files: map[uint32]*os.File{}, reserve: s.opts.reserve()}
	s.log = l
	replay := s.replaySegments
	if s.readOnly.Load() {
		replay = s.openSegmentsReadOnly
	}
	if err := replay(l); err != nil {
		l.close()
		s.log = nil
		return err
	}
	return nil
}

func (s *Store) replaySegments(l *segLog) error {
	segs, err := listSegments(s.dir)
	if err != nil {
		return err
	}
	markSeg, markOff, marked, err := s.readMark()
	if err != nil {
		return err
	}
	if marked && (len(segs) == 0 || markSeg > segs[len(segs)-1]) {
		return fmt.Errorf("%w: log segment %d, where replay must start, is missing", ErrCorrupted, markSeg)
	}
	if len(segs) == 0 {
		f, nonce, err := createSegment(s.dir, 1)
		if err != nil {
			return err
		}
		if err := l.openAppend(f, 1, nonce, segDataStart); err != nil {
			return err
		}
		return s.mark()
	}
	replayed := false
	var last *os.File
	var lastNonce uint64
	var end int64
	for i, n := range segs {
		newest := i == len(segs)-1
		mode := os.O_RDONLY
		if newest {
			mode = os.O_RDWR
		}
		f, err := os.OpenFile(filepath.Join(s.dir, segName(n)), mode, 0)
		if err != nil {
			return fmt.Errorf("opening log segment: %w", err)
		}
		l.files[n] = f
		fi, err := f.Stat()
		if err != nil {
			return fmt.Errorf("opening log segment: %w", err)
		}
		nonce, herr := readSegmentHeader(f, n)
		if herr != nil {
			if !errors.Is(herr, ErrCorrupted) || !newest || fi.Size() > segDataStart {
				return herr
			}
			// A segment is started only once badger holds everything
			// before it, and written to only once its header is durable:
			// a torn header with nothing after it stands for an empty
			// segment.
			f.Close()
			delete(l.files, n)
			if f, nonce, err = createSegment(s.dir, n); err != nil {
				return err
			}
			l.files[n] = f
			last, lastNonce, end = f, nonce, segDataStart
			continue
		}
		if marked && n < markSeg {
			continue
		}
		start := int64(segDataStart)
		if marked && n == markSeg {
			start = markOff
		}
		frame := 0
		stop, err := scanFrames(f, nonce, start, fi.Size(), func(payOff int64, p []byte) error {
			frame++
			ops, err := decodeOps(p, n, payOff)
			if err == nil {
				err = applyOps(s.db, ops)
			}
			if err != nil {
				return fmt.Errorf("%w: replaying frame %d of log segment %d: %v", ErrCorrupted, frame, n, err)
			}
			replayed = true
			return nil
		})
		if err != nil {
			return err
		}
		if newest {
			last, lastNonce, end = f, nonce, stop
		}
	}
	if replayed {
		if err := syncBadger(s.db, s.dir); err != nil {
			return err
		}
	}
	if err := l.openAppend(last, segs[len(segs)-1], lastNonce, end); err != nil {
		return err
	}
	if replayed || !marked || markSeg != segs[len(segs)-1] || markOff != end {
		return s.mark()
	}
	l.marked = markSeg
	return nil
}

var formatKey = []byte{pMeta, 'v'}

// checkFormat marks a new store with formatVersion and refuses, with a
// *FormatError and without writing, one marked with another format.
func (s *Store) checkFormat() error {
	var found []byte
	err := s.db.View(func(txn *badger.Txn) error {
		it, err := txn.Get(formatKey)
		if errors.Is(err, badger.ErrKeyNotFound) {
			return nil
		}
		if err == nil {
			found, err = it.ValueCopy(nil)
		}
		if err != nil {
			return fmt.Errorf("%w: reading format marker: %v", ErrCorrupted, err)
		}
		return nil
	})
	switch {
	case err != nil:
		return err
	case found == nil && s.readOnly.Load():
		return s.full.Load() // a new store cannot be made on a full disk
	case found == nil || string(found) == formatV3 && !s.readOnly.Load():
		// Synced at once: records of the new layout may follow.
		err := s.db.Update(func(txn *badger.Txn) error { return txn.Set(formatKey, []byte(formatVersion)) })
		if err == nil {
			err = s.db.Sync()
		}
		return err
	case string(found) == formatV3: // read-only: nothing is written in the new layout
		return nil
	case string(found) != formatVersion:
		return &FormatError{Dir: s.dir, Found: string(found), Want: formatVersion, Older: olderFormat(string(found))}
	}
	return nil
}

// olderFormat reports whether v names a format of this store before
// formatVersion ("cmbnode-store-N" with a smaller N).
func olderFormat(v string) bool {
	const prefix = "cmbnode-store-"
	n, err := strconv.Atoi(strings.TrimPrefix(v, prefix))
	want, _ := strconv.Atoi(strings.TrimPrefix(formatVersion, prefix))
	return strings.HasPrefix(v, prefix) && err == nil && n >= 1 && n < want
}

// load counts records and rebuilds the in-memory text index from them.
// Records in the log are read in log order, not key order, so each
// segment is read front to back, as read-ahead serves best, rather than at
// random.
func (s *Store) load(ctx context.Context) error {
	var n int64
	s.loadedKeys = map[string]struct{}{}
	add := func(key string, v []byte) error {
		rec, err := decodeRecord(key, v, false)
		if err != nil {
			return fmt.Errorf("%w: record %q: %v", ErrCorrupted, key, err)
		}
		s.loadedKeys[rec.Key] = struct{}{}
		n++
		if rec.Meta.Quarantined {
			s.trust.quarantine(rec.Key)
			return nil
		}
		if rec.Meta.Forgotten {
			return nil // in s.trust.forgotten through its tombstone (loadTombstones)
		}
		at := s.orderAt(&rec)
		s.order.add(rec.Key, at, rec.Group, rec.CreatedBy)
		s.loadedTexts = append(s.loadedTexts, loadedText{key: rec.Key, group: rec.Group, at: at, texts: rec.Texts})
		s.lines.add(rec.Key, at, rec.Parents)
		return nil
	}
	type located struct {
		key string
		p   segPtr
	}
	var inLog []located
	err := s.scan(ctx, badger.IteratorOptions{PrefetchValues: true, PrefetchSize: 64, Prefix: []byte{pRec}}, func(item *badger.Item) error {
		key := string(item.Key()[1:])
		return item.Value(func(v []byte) error {
			p, err := decodePtr(v)
			if err != nil {
				return fmt.Errorf("%w: record %q: %v", ErrCorrupted, key, err)
			}
			inLog = append(inLog, located{key, p})
			return nil
		})
	})
	if err != nil {
		return err
	}
	slices.SortFunc(inLog, func(a, b located) int {
		return cmp.Or(cmp.Compare(a.p.seg, b.p.seg), cmp.Compare(a.p.off, b.p.off))
	})
	for _, r := range inLog {
		if err := ctx.Err(); err != nil {
			return err
		}
		v, err := s.log.read(r.p)
		if errors.Is(err, errSegmentGone) {
			// Nothing removes segments during Open: badger points into one
			// that is not there.
			err = fmt.Errorf("%w: %v", ErrCorrupted, err)
		}
		if err != nil {
			return fmt.Errorf("record %q: %w", r.key, err)
		}
		if err := add(r.key, v); err != nil {
			return err
		}
	}
	s.count.Store(n)
	return nil
}

// Close flushes and closes the store. Pending puts are committed first.
func (s *Store) Close() error {
	var err error
	s.closeOnce.Do(func() {
		s.closed.Store(true)
		s.cm.mu.Lock()
		s.cm.closed = true
		s.cm.mu.Unlock()
		close(s.closing)
		<-s.wdone
		<-s.compact.done
		// Once badger is durable no frame needs replaying: the mark moves
		// to the end of the log, and the segment drops its unused room.
		var serr error
		if !s.readOnly.Load() {
			serr = syncBadger(s.db, s.dir)
		}
		if serr == nil && s.broken() == nil && !s.readOnly.Load() {
			if serr = s.log.seal(); serr == nil {
				serr = s.mark()
			}
		}
		if cerr := s.db.Close(); cerr != nil {
			err = fmt.Errorf("closing store %s: %w", s.dir, cerr)
		}
		if serr != nil && err == nil {
			err = fmt.Errorf("closing store %s: %w", s.dir, serr)
		}
		s.log.close()
	})
	return err
}

// Dir is the directory the store lives in.
func (s *Store) Dir() string { return s.dir }

// Count is the number of stored records.
func (s *Store) Count() int {
	s.waitApplied(context.Background())
	return int(s.count.Load())
}

// Stats describes the store for status output and benchmarks.
type Stats struct {
	Records   int
	Peers     int
	Terms     int
	LSMBytes  int64
	VLogBytes int64
	// LogBytes is the size of the log segments, which hold the records.
	LogBytes int64
	// DiskBytes is the allocated size of every file in the store directory.
	DiskBytes int64
	// Commits and CommittedJobs since Open: their ratio is the mean number
	// of writes sharing one durable commit.
	Commits, CommittedJobs int64
}

// Stats reports counts and sizes.
func (s *Store) Stats(ctx context.Context) (Stats, error) {
	if err := s.waitApplied(ctx); err != nil {
		return Stats{}, err
	}
	st := Stats{Records: int(s.count.Load()), Terms: s.idx.termCount(), Commits: s.batches.Load(), CommittedJobs: s.batched.Load()}
	s.rlockDB()
	st.LSMBytes, st.VLogBytes = s.db.Size()
	s.dbMu.RUnlock()
	st.LogBytes = s.log.bytes()
	err := s.scan(context.Background(), badger.IteratorOptions{Prefix: []byte{pPeer}}, func(*badger.Item) error {
		st.Peers++
		return nil
	})
	if err != nil {
		return st, fmt.Errorf("counting peers: %w", err)
	}
	st.DiskBytes, err = DirDiskBytes(s.dir)
	return st, err
}

// DirDiskBytes sums the blocks allocated to the files under dir (sparse
// preallocated files count only what they use).
func DirDiskBytes(dir string) (int64, error) {
	var total int64
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			total += st.Blocks * 512
		} else {
			total += fi.Size()
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("measuring %s: %w", dir, err)
	}
	return total, nil
}

type badgerLogger struct{ l *slog.Logger }

func (b badgerLogger) Errorf(f string, a ...any) {
	if b.l != nil {
		b.l.Error(strings.TrimSpace(fmt.Sprintf(f, a...)), "component", "badger")
	}
}
func (b badgerLogger) Warningf(f string, a ...any) {
	if b.l != nil {
		b.l.Warn(strings.TrimSpace(fmt.Sprintf(f, a...)), "component", "badger")
	}
}
func (b badgerLogger) Infof(string, ...any)  {}
func (b badgerLogger) Debugf(string, ...any) {}
