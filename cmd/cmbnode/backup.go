package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/cmbnode/cmbnode/cmb"
	"github.com/cmbnode/cmbnode/node"
	"github.com/cmbnode/cmbnode/node/daemon"
	"github.com/cmbnode/cmbnode/node/ipc"
)

// sinceFlag parses --since: an RFC 3339 time or date, a duration back from
// now (24h), or Unix milliseconds.
func sinceFlag(s string, now time.Time) (int64, error) {
	if s == "" {
		return 0, nil
	}
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t.UnixMilli(), nil
	}
	if t, err := time.Parse("2006-01-02", s); err == nil {
		return t.UnixMilli(), nil
	}
	if d, err := time.ParseDuration(s); err == nil && d >= 0 {
		return now.Add(-d).UnixMilli(), nil
	}
	if ms, err := strconv.ParseInt(s, 10, 64); err == nil && ms >= 0 {
		return ms, nil
	}
	return 0, usagef("--since %q: give a time (2026-07-01 or 2026-07-01T12:00:00Z), a duration back from now (24h) or Unix milliseconds", s)
}

func cmdExport(e *env, args []string) error {
	fs := newFlags(e, "export", "export [--since T] [--author A] [--home DIR] > memories.ndjson")
	home := homeFlag(fs)
	since := fs.String("since", "", "only records from T on: 2026-07-01, an RFC 3339 time, a duration back (24h) or Unix ms")
	author := fs.String("author", "", "only records created by this nodeId")
	if err := e.parseNone(fs, args); err != nil {
		return err
	}
	from, err := sinceFlag(*since, time.Now())
	if err != nil {
		return err
	}
	s, done, err := connect(e, *home)
	if err != nil {
		return err
	}
	defer done()
	w := bufio.NewWriter(e.stdout)
	n := 0
	for after := ""; ; {
		var page node.ExportPage
		req := map[string]any{"since": from, "author": *author, "after": after}
		if _, err := s.fetch(e, ipc.TypeExport, req, false, &page, "an unreadable export page"); err != nil {
			return err
		}
		for _, l := range page.Records {
			b, err := json.Marshal(l)
			if err != nil {
				return fmt.Errorf("daemon sent an unreadable record: %w", err)
			}
			if _, err := w.Write(append(b, '\n')); err != nil {
				return fmt.Errorf("write the export: %w", err)
			}
			n++
		}
		if page.Next == "" {
			break
		}
		after = page.Next
	}
	if err := w.Flush(); err != nil {
		return fmt.Errorf("write the export: %w", err)
	}
	fmt.Fprintf(e.stderr, "cmbnode export: %d records\n", n)
	return nil
}

// An import request carries at most this many records or bytes, well
// inside the socket's message cap.
const (
	importBatch      = 256
	importBatchBytes = 512 << 10
)

// importLine is one line of an import file with its line number.
type importLine struct {
	no   int
	line node.ExportLine
}

func cmdImport(e *env, args []string) error {
	fs := newFlags(e, "import", "import [--home DIR] [--json] < memories.ndjson")
	home, asJSON := clientFlags(fs)
	if err := e.parseNone(fs, args); err != nil {
		return err
	}
	s, done, err := connect(e, *home)
	if err != nil {
		return err
	}
	defer done()
	var total node.ImportResult
	var problems []string
	problem := func(no int, key, reason string) {
		total.Rejected++
		if len(problems) < node.MaxImportProblems {
			if key != "" {
				reason = key + ": " + reason
			}
			problems = append(problems, fmt.Sprintf("line %d: %s", no, reason))
		}
	}
	var batch []importLine
	size := 0
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		lines := make([]node.ExportLine, len(batch))
		for i, b := range batch {
			lines[i] = b.line
		}
		var res node.ImportResult
		if _, err := s.fetch(e, ipc.TypeImport, map[string]any{"records": lines}, false, &res, "an unreadable import result"); err != nil {
			return err
		}
		total.Imported += res.Imported
		total.Duplicates += res.Duplicates
		total.NotForUs += res.NotForUs
		total.Rejected += res.Rejected - len(res.Problems)
		for _, p := range res.Problems {
			no := 0
			if p.Index >= 0 && p.Index < len(batch) {
				no = batch[p.Index].no
			}
			problem(no, p.Key, p.Reason)
		}
		batch, size = batch[:0], 0
		return nil
	}
	br := bufio.NewReaderSize(e.stdin, 64<<10)
	for no := 1; ; no++ {
		b, err := readImportLine(br)
		if errors.Is(err, io.EOF) && len(b) == 0 {
			break
		}
		if errors.Is(err, errLineTooLong) {
			problem(no, "", fmt.Sprintf("over %d bytes, not a record", ipc.MaxMessage/2))
			continue
		}
		if err != nil && !errors.Is(err, io.EOF) {
			return fmt.Errorf("read the import from stdin: %w", err)
		}
		if len(b) == 0 {
			continue
		}
		l, perr := parseImportLine(b)
		if perr != nil {
			problem(no, "", perr.Error())
			continue
		}
		if len(batch) == importBatch || size+len(b) > importBatchBytes {
			if err := flush(); err != nil {
				return err
			}
		}
		batch = append(batch, importLine{no, l})
		size += len(b)
	}
	if err := flush(); err != nil {
		return err
	}
	if *asJSON {
		if err := writeJSON(e.stdout, map[string]any{"imported": total.Imported, "duplicates": total.Duplicates, "notForUs": total.NotForUs, "rejected": total.Rejected, "problems": problems}); err != nil {
			return err
		}
	} else {
		fmt.Fprintf(e.stdout, "imported %d, already held %d, directed to another node %d, rejected %d\n", total.Imported, total.Duplicates, total.NotForUs, total.Rejected)
		for _, p := range problems {
			fmt.Fprintln(e.stdout, "  "+p)
		}
	}
	if total.Rejected > 0 {
		return &rejected{} // the counts said it; exit 1
	}
	return nil
}

var errLineTooLong = errors.New("line too long")

// readImportLine reads one line of at most half a socket message (a record
// and its keys must fit in an import request), skipping the rest of a
// longer one.
func readImportLine(br *bufio.Reader) ([]byte, error) {
	var buf []byte
	for {
		part, err := br.ReadSlice('\n')
		if len(buf)+len(part) > ipc.MaxMessage/2 {
			for errors.Is(err, bufio.ErrBufferFull) {
				_, err = br.ReadSlice('\n')
			}
			return nil, errLineTooLong
		}
		buf = append(buf, part...)
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		return bytes.TrimSpace(buf), err
	}
}

// parseImportLine reads an export line ({"cmb":{…},"publicKey":…}) or a
// bare record.
func parseImportLine(b []byte) (node.ExportLine, error) {
	var l node.ExportLine
	if err := json.Unmarshal(b, &l); err != nil {
		return l, fmt.Errorf("not a JSON object: %v", err)
	}
	if len(l.CMB) == 0 {
		var probe struct {
			Key string `json:"key"`
		}
		if json.Unmarshal(b, &probe) != nil || cmb.SchemeOf(probe.Key) == cmb.SchemeUnknown {
			return l, errors.New("neither an export line ({\"cmb\":{…}}) nor a record")
		}
		l.CMB = json.RawMessage(b)
	}
	return l, nil
}

func cmdCheck(e *env, args []string) error {
	fs := newFlags(e, "check", "check [--home DIR] [--json]")
	home, asJSON := clientFlags(fs)
	if err := e.parseNone(fs, args); err != nil {
		return err
	}
	h, err := resolveHome(*home)
	if err != nil {
		return err
	}
	var res node.CheckResult
	by := "the running daemon"
	c, err := ipc.Dial(e.ctx, daemon.SocketPath(h))
	switch {
	case err == nil:
		defer c.Close()
		raw, err := c.Call(e.ctx, ipc.TypeCheck, nil)
		if err != nil {
			return daemonErr(err)
		}
		if err := json.Unmarshal(raw, &res); err != nil {
			return fmt.Errorf("daemon sent an unreadable check result: %w", err)
		}
	case errors.Is(err, ipc.ErrNoDaemon):
		by = "cmbnode check (no daemon was running)"
		res, err = daemon.CheckOffline(e.ctx, h)
		var running *daemon.RunningError
		switch {
		case errors.As(err, &running):
			return fmt.Errorf("%w; run `cmbnode check` again once it serves its socket, or stop it", err)
		case errors.Is(err, daemon.ErrNoStore):
			return fmt.Errorf("%w; this home has never run a daemon, so there is nothing to check", err)
		case err != nil:
			return withFix(err)
		}
	default:
		return err
	}
	if *asJSON {
		if err := writeJSON(e.stdout, res); err != nil {
			return err
		}
	} else if res.OK {
		fmt.Fprintf(e.stdout, "store ok: %d records, every index agrees (checked by %s)\n", res.Records, by)
	} else {
		fmt.Fprintf(e.stdout, "store check found %d problem(s) in %d records (checked by %s):\n", len(res.Problems), res.Records, by)
		for _, p := range res.Problems {
			fmt.Fprintln(e.stdout, "  "+p)
		}
		fmt.Fprintln(e.stdout, "restore from a backup (`cmbnode import`) or move the store aside and let the node catch up from its peers")
	}
	if !res.OK {
		return &rejected{}
	}
	return nil
}
