package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/cmbnode/cmbnode/cmb"
	"github.com/cmbnode/cmbnode/store"
)

// ExportLine is one exported record: the record exactly as held, with the
// author's keys as this node knows them, so a node that never met the
// author can verify it (its import pins them as unconfirmed).
type ExportLine struct {
	CMB          json.RawMessage `json:"cmb"`
	PublicKey    string          `json:"publicKey,omitempty"`
	E2EPublicKey string          `json:"e2ePublicKey,omitempty"`
}

// ExportQuery selects one page of an export.
type ExportQuery struct {
	// Since keeps records whose time is at or after it (Unix ms; 0: all).
	Since int64
	// Author keeps one author's records ("" : every author).
	Author string
	// After is the cursor a previous page returned as Next ("": the start).
	After string
	// Limit bounds the records of the page (default and cap ExportPageMax).
	Limit int
	// MaxBytes bounds the page's record bytes (default ExportPageBytes); a
	// page holds at least one record.
	MaxBytes int
}

// The bounds of one export page.
const (
	ExportPageMax   = 1000
	ExportPageBytes = 512 << 10
)

// ExportPage is one page of records, oldest first; Next resumes after its
// last record, and is "" once the export is complete.
type ExportPage struct {
	Records []ExportLine `json:"records"`
	Next    string       `json:"next,omitempty"`
}

// errPageFull stops the scan once a page is full.
var errPageFull = errors.New("page full")

// Export returns one page of the records held here (quarantined ones left
// out), in (time, key) order, the order the store keeps and catch-up uses.
func (n *Node) Export(ctx context.Context, q ExportQuery) (ExportPage, error) {
	if q.Limit <= 0 || q.Limit > ExportPageMax {
		q.Limit = ExportPageMax
	}
	if q.MaxBytes <= 0 {
		q.MaxBytes = ExportPageBytes
	}
	from, afterAt, afterKey := q.Since, int64(0), ""
	if q.After != "" {
		t, k, ok := strings.Cut(q.After, "/")
		at, err := strconv.ParseInt(t, 10, 64)
		if !ok || err != nil || cmb.SchemeOf(k) == cmb.SchemeUnknown {
			return ExportPage{}, fmt.Errorf("%w: after %q is not a cursor an export page returned", ErrBadRequest, cmb.Truncate(q.After, 80))
		}
		from, afterAt, afterKey = max(from, at), at, k
	}
	w := store.Window{AnyGroup: true, From: from, Author: q.Author}
	page := ExportPage{Records: []ExportLine{}}
	size := 0
	var last store.KeyTime
	keys := map[string][2]string{} // author → keys, looked up once a page
	err := n.st.Scan(ctx, w, func(kt store.KeyTime) error {
		if afterKey != "" && kt.CreatedAt == afterAt && kt.Key <= afterKey {
			return nil
		}
		if len(page.Records) == q.Limit || (len(page.Records) > 0 && size >= q.MaxBytes) {
			return errPageFull
		}
		r, err := n.st.Get(ctx, kt.Key)
		if errors.Is(err, store.ErrNotFound) || err == nil && (r.Meta.Quarantined || r.Meta.Forgotten) {
			return nil // purged since the scan began, or not surfaced
		}
		if err != nil {
			return fmt.Errorf("read %s: %w", kt.Key, err)
		}
		author := r.Entry.CreatedBy
		k, ok := keys[author]
		if !ok {
			pub, x := n.FrameKeys(ctx, author)
			k = [2]string{pub, x}
			keys[author] = k
		}
		page.Records = append(page.Records, ExportLine{CMB: r.Raw, PublicKey: k[0], E2EPublicKey: k[1]})
		size += len(r.Raw) + len(k[0]) + len(k[1])
		last = kt
		return nil
	})
	if errors.Is(err, errPageFull) {
		page.Next = strconv.FormatInt(last.CreatedAt, 10) + "/" + last.Key
		err = nil
	}
	if err != nil {
		return ExportPage{}, fmt.Errorf("export: %w", err)
	}
	return page, nil
}

// ImportResult counts what an import did with its records.
type ImportResult struct {
	Imported   int `json:"imported"`
	Duplicates int `json:"duplicates"`
	// NotForUs are valid records directed to another node: never stored.
	NotForUs int `json:"notForUs"`
	Rejected int `json:"rejected"`
	// Problems say why records were rejected (at most MaxImportProblems).
	Problems []ImportProblem `json:"problems"`
}

// ImportProblem is one rejected record of an import.
type ImportProblem struct {
	Index  int    `json:"index"` // in the request's records
	Key    string `json:"key,omitempty"`
	Reason string `json:"reason"`
}

// MaxImportProblems bounds the problems one import reports.
const MaxImportProblems = 100

// SourceImport is the source stored records imported from a file name.
const SourceImport = "import"

// Import verifies each record through the receive pipeline, exactly as if a
// peer had delivered it (Check, then Accept): group, author key (the roster's
// pin, else the keys the line carries, pinned as unconfirmed), address,
// signature, lineage. Valid records are stored; a re-import stores nothing
// new. Only a failure of this node (the store) is an error.
func (n *Node) Import(ctx context.Context, lines []ExportLine) (ImportResult, error) {
	res := ImportResult{Problems: []ImportProblem{}}
	reject := func(i int, key string, err error) {
		res.Rejected++
		if len(res.Problems) < MaxImportProblems {
			res.Problems = append(res.Problems, ImportProblem{Index: i, Key: cmb.Truncate(key, 80), Reason: err.Error()})
		}
	}
	for i, l := range lines {
		rec, err := cmb.Decode(l.CMB)
		if err != nil {
			reject(i, "", err)
			continue
		}
		src := Source{PeerID: SourceImport, AuthorKey: l.PublicKey, AuthorE2E: l.E2EPublicKey, Via: SourceImport}
		c, err := n.Check(ctx, rec, src)
		switch {
		case errors.Is(err, ErrNotForUs):
			res.NotForUs++
			continue
		case err != nil && isStoreFailure(err):
			return res, err
		case err != nil:
			reject(i, rec.Key, err)
			continue
		}
		dup, err := n.Accept(ctx, c)
		switch {
		case err != nil && isStoreFailure(err):
			return res, err
		case err != nil:
			reject(i, rec.Key, err)
		case dup || c.Duplicate:
			res.Duplicates++
		default:
			res.Imported++
		}
	}
	return res, nil
}

// isStoreFailure tells this node's failures from verdicts on a record.
func isStoreFailure(err error) bool {
	return cmb.ReasonOf(err) == "" && !errors.Is(err, ErrRejected) && !errors.Is(err, ErrBadRequest)
}

// CheckResult is the store's consistency check: OK, or each disagreement
// between the records and their indexes.
type CheckResult struct {
	OK       bool     `json:"ok"`
	Records  int      `json:"records"`
	Problems []string `json:"problems"`
}

// CheckStore runs the store's consistency check (store.Check). Problems are
// the result; an error means the check could not run.
func (n *Node) CheckStore(ctx context.Context) (CheckResult, error) { return CheckOf(ctx, n.st) }

// CheckOf is CheckStore on an open store no node holds (the offline check).
func CheckOf(ctx context.Context, st *store.Store) (CheckResult, error) {
	err := st.Check(ctx)
	var ce *store.CheckError
	switch {
	case err == nil:
		return CheckResult{OK: true, Records: st.Count(), Problems: []string{}}, nil
	case errors.As(err, &ce):
		return CheckResult{Records: st.Count(), Problems: ce.Problems}, nil
	}
	return CheckResult{}, fmt.Errorf("check the store: %w", err)
}
