package store

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"time"
	"unsafe"
)

// Key layout. One byte of prefix per keyspace; index keys embed the record
// key so that every index entry can be traced back to its record by Check.
// 0x00 separates variable-length parts, which is why Validate refuses NUL.
const (
	pRec    = 'r' // r key                          → record value
	pChild  = 'C' // C parent 0 child               → ∅
	pRefBy  = 'D' // D ancestor 0 descendant        → ∅ (ancestors ∪ parents)
	pPeer   = 'P' // P nodeId                       → peer JSON
	pMeta   = 'M' // M name                         → store metadata
	pSigner = 'S' // S author                       → 1 (author has signed)
	pTomb   = 'T' // T key                          → forgottenAt (varint ms): forgotten here
	pAssert = 'A' // A key 0 author                 → that author's signed record (same key, another author)
	pAnnex  = 'X' // X namespace 0 key              → the node's annex of a record (annex.go)
	// recFormat is the layout records are written in; recFormat1 (every
	// text written out) is still read.
	recFormat  = 2
	recFormat1 = 1

	maxKeyLen = 256
)

func recKey(k string) []byte { return append([]byte{pRec}, k...) }

func edgeKey(p byte, from, to string) []byte {
	b := make([]byte, 0, 2+len(from)+len(to))
	b = append(b, p)
	b = append(b, from...)
	b = append(b, 0)
	return append(b, to...)
}

func edgePrefix(p byte, from string) []byte {
	b := make([]byte, 0, 2+len(from))
	b = append(b, p)
	b = append(b, from...)
	return append(b, 0)
}

// indexKeys lists every index key a record owns (not the record key itself).
func indexKeys(e *Entry) [][]byte {
	keys := make([][]byte, 0, len(e.Parents)+len(e.Ancestors))
	for _, p := range e.Parents {
		keys = append(keys, edgeKey(pChild, p, e.Key))
	}
	for _, a := range refTargets(e) {
		keys = append(keys, edgeKey(pRefBy, a, e.Key))
	}
	return keys
}

// refTargets is ancestors ∪ parents without duplicates: everything whose
// deletion this record's lineage forbids.
func refTargets(e *Entry) []string {
	out := make([]string, 0, len(e.Ancestors)+len(e.Parents))
	seen := make(map[string]struct{}, len(e.Ancestors)+len(e.Parents))
	for _, l := range [2][]string{e.Ancestors, e.Parents} {
		for _, a := range l {
			if _, ok := seen[a]; ok {
				continue
			}
			seen[a] = struct{}{}
			out = append(out, a)
		}
	}
	return out
}

// Validate reports why an entry cannot be stored, or nil.
func (e *Entry) Validate() error {
	if err := checkName("key", e.Key, false); err != nil {
		return err
	}
	if err := checkName("createdBy", e.CreatedBy, true); err != nil {
		return err
	}
	if err := checkName("group", e.Group, true); err != nil {
		return err
	}
	for _, l := range [...]struct {
		what, article string
		keys          []string
	}{{"parent", "a", e.Parents}, {"ancestor", "an", e.Ancestors}} {
		for _, k := range l.keys {
			if err := checkName(l.what, k, false); err != nil {
				return err
			}
			if k == e.Key {
				return fmt.Errorf("%w: %s lists itself as %s %s", ErrInvalid, e.Key, l.article, l.what)
			}
		}
	}
	return nil
}

func checkName(what, v string, emptyOK bool) error {
	switch {
	case v == "" && !emptyOK:
		return fmt.Errorf("%w: empty %s", ErrInvalid, what)
	case len(v) > maxKeyLen:
		return fmt.Errorf("%w: %s longer than %d bytes", ErrInvalid, what, maxKeyLen)
	case strings.IndexByte(v, 0) >= 0:
		return fmt.Errorf("%w: %s contains a NUL byte", ErrInvalid, what)
	}
	return nil
}

const (
	flVerified = 1 << iota
	flDecrypted
	flDirected
	flKept
	flQuarantined
	flForgotten
)

// encodeRecord lays a record out as: format, flags, storedAt, source,
// createdBy, createdAt, group, to, parents, ancestors, 7 texts, raw. The key
// is not repeated: it is the badger key. A text whose bytes are in raw
// (a record in clear, whose texts need no escaping in its JSON) is
// written as where it is there, so it is on disk once: uvarint
// offset<<1|1, uvarint length. Any other text is uvarint length<<1 and
// its bytes.
func encodeRecord(r *Record) []byte {
	// Where each text is in raw (-1: not there) is found first, so the
	// value is allocated at its size: a referenced text costs a few bytes,
	// not its length.
	var refs [NumFields]int
	n := 32 + len(r.Meta.Source) + len(r.CreatedBy) + len(r.Group) + len(r.To) + len(r.Raw)
	for _, p := range r.Parents {
		n += len(p) + 2
	}
	for _, a := range r.Ancestors {
		n += len(a) + 2
	}
	// A text is looked for after the one before it first: a record's
	// fields are encoded in field order, so the search scans a few bytes
	// where one from the start would scan the texts before it again. Any
	// place the bytes are found at is a right reference.
	from := 0
	for i, t := range r.Texts {
		refs[i] = -1
		if len(t) > minTextRef {
			tb := unsafe.Slice(unsafe.StringData(t), len(t)) // only read
			off := bytes.Index(r.Raw[from:], tb)
			if off >= 0 {
				off += from
			} else {
				off = bytes.Index(r.Raw, tb)
			}
			if off >= 0 {
				from = off + len(t)
				refs[i] = off
				n += 2 * binary.MaxVarintLen64
				continue
			}
		}
		n += len(t) + binary.MaxVarintLen64
	}
	b := make([]byte, 0, n)
	b = append(b, recFormat, metaFlags(r.Meta))
	b = binary.AppendVarint(b, r.Meta.StoredAt.UnixNano())
	b = appendStr(b, r.Meta.Source)
	b = appendStr(b, r.CreatedBy)
	b = binary.AppendVarint(b, r.CreatedAt)
	b = appendStr(b, r.Group)
	b = appendStr(b, r.To)
	b = appendList(b, r.Parents)
	b = appendList(b, r.Ancestors)
	for i, t := range r.Texts {
		if off := refs[i]; off >= 0 {
			b = binary.AppendUvarint(b, uint64(off)<<1|1)
			b = binary.AppendUvarint(b, uint64(len(t)))
			continue
		}
		b = binary.AppendUvarint(b, uint64(len(t))<<1)
		b = append(b, t...)
	}
	return append(b, r.Raw...)
}

// metaFlag is one flag bit and the Meta field it stands for.
type metaFlag struct {
	bit byte
	on  *bool
}

func (m *Meta) flagBits() [6]metaFlag {
	return [6]metaFlag{{flVerified, &m.Verified}, {flDecrypted, &m.Decrypted}, {flDirected, &m.Directed},
		{flKept, &m.Kept}, {flQuarantined, &m.Quarantined}, {flForgotten, &m.Forgotten}}
}

// minTextRef is the shortest text worth a reference into raw.
const minTextRef = 8

func metaFlags(m Meta) byte {
	var f byte
	for _, fl := range m.flagBits() {
		if *fl.on {
			f |= fl.bit
		}
	}
	return f
}

func appendStr(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func appendList(b []byte, l []string) []byte {
	b = binary.AppendUvarint(b, uint64(len(l)))
	for _, s := range l {
		b = appendStr(b, s)
	}
	return b
}

var errShort = errors.New("truncated record value")

type reader struct {
	b   []byte
	err error
}

func (r *reader) uvarint() uint64 { return readVarint(r, binary.Uvarint) }

func (r *reader) varint() int64 { return readVarint(r, binary.Varint) }

// readVarint reads one varint with read (binary.Uvarint or binary.Varint).
func readVarint[T uint64 | int64](r *reader, read func([]byte) (T, int)) T {
	if r.err != nil {
		return 0
	}
	v, n := read(r.b)
	if n <= 0 {
		r.err = errShort
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) str() string {
	n := r.uvarint()
	if r.err != nil {
		return ""
	}
	if n > uint64(len(r.b)) {
		r.err = errShort
		return ""
	}
	s := string(r.b[:n])
	r.b = r.b[n:]
	return s
}

func (r *reader) list() []string {
	n := r.uvarint()
	if r.err != nil || n == 0 {
		return nil
	}
	if n > uint64(len(r.b)) {
		r.err = errShort
		return nil
	}
	l := make([]string, n)
	for i := range l {
		l[i] = r.str()
	}
	return l
}

// decodeRecord parses a record value. withRaw=false skips copying Raw, for
// callers that only need lineage or texts.
func decodeRecord(key string, v []byte, withRaw bool) (Record, error) {
	var rec Record
	if len(v) < 2 {
		return rec, errShort
	}
	if v[0] != recFormat && v[0] != recFormat1 {
		return rec, fmt.Errorf("unknown record format %d", v[0])
	}
	fl := v[1]
	r := reader{b: v[2:]}
	rec.Key = key
	rec.Meta.StoredAt = time.Unix(0, r.varint())
	rec.Meta.Source = r.str()
	for _, f := range rec.Meta.flagBits() {
		*f.on = fl&f.bit != 0
	}
	rec.CreatedBy = r.str()
	rec.CreatedAt = r.varint()
	rec.Group = r.str()
	rec.To = r.str()
	rec.Parents = r.list()
	rec.Ancestors = r.list()
	if v[0] == recFormat1 {
		for i := range rec.Texts {
			rec.Texts[i] = r.str()
		}
	} else {
		var refs [NumFields][2]uint64 // offset+1 (0: written out), length
		for i := range rec.Texts {
			tag := r.uvarint()
			if tag&1 == 0 {
				n := tag >> 1
				if r.err == nil && n > uint64(len(r.b)) {
					r.err = errShort
				}
				if r.err == nil {
					rec.Texts[i] = string(r.b[:n])
					r.b = r.b[n:]
				}
				continue
			}
			refs[i] = [2]uint64{tag>>1 + 1, r.uvarint()}
		}
		for i, ref := range refs {
			if ref[0] == 0 || r.err != nil {
				continue
			}
			off, n := ref[0]-1, ref[1]
			if off > uint64(len(r.b)) || n > uint64(len(r.b))-off {
				r.err = errShort
				continue
			}
			rec.Texts[i] = string(r.b[off : off+n])
		}
	}
	if r.err != nil {
		return rec, r.err
	}
	if withRaw {
		rec.Raw = append([]byte(nil), r.b...)
	}
	return rec, nil
}
