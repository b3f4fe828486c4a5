package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/cmbnode/cmbnode/cmb"
	"github.com/cmbnode/cmbnode/node"
	"github.com/cmbnode/cmbnode/node/daemon"
	"github.com/cmbnode/cmbnode/node/identity"
	"github.com/cmbnode/cmbnode/node/ipc"
	"github.com/cmbnode/cmbnode/node/svaf"
)

// callTimeout bounds one CLI request to the daemon, so a wedged daemon
// cannot hang a script forever.
const callTimeout = 2 * time.Minute

// clientFlags registers what every socket client takes.
func clientFlags(fs *flag.FlagSet) (home *string, asJSON *bool) {
	return homeFlag(fs), fs.Bool("json", false, "print one JSON object")
}

// session is one connection to the daemon for one command.
type session struct {
	c   *ipc.Client
	ctx context.Context
}

func connect(e *env, homeFlag string) (*session, func(), error) {
	h, err := resolveHome(homeFlag)
	if err != nil {
		return nil, nil, err
	}
	sock := daemon.SocketPath(h)
	ctx, cancel := context.WithTimeout(e.ctx, callTimeout)
	c, err := ipc.Dial(ctx, sock)
	if err != nil {
		cancel()
		if errors.Is(err, ipc.ErrNoDaemon) {
			return nil, nil, noDaemon(h, sock)
		}
		return nil, nil, err
	}
	return &session{c: c, ctx: ctx}, func() { c.Close(); cancel() }, nil
}

// noDaemon words a failed connection: the exact command that starts this
// home's daemon, and, when the home holds no node yet, that the command
// would create one, so the hint never quietly leads to a second identity.
func noDaemon(home, sock string) error {
	if _, err := os.Stat(identity.Path(home)); err == nil {
		return fmt.Errorf("no daemon is running at %s; start this node's daemon with `cmbnode daemon --home %s`", sock, home)
	}
	return fmt.Errorf("no daemon is running at %s and %s holds no node yet; if your daemon runs with another home, pass that --home (or set $%s), else create a node here with `cmbnode daemon --home %s`", sock, home, identity.HomeEnv, home)
}

// request runs an argument-less client command (flags --home and --json)
// as one request, its reply decoded into out (fetch). It returns the socket
// it went to for the caller to render, or "" when --json printed the reply.
func request(e *env, args []string, name, typ string, out any, what string) (string, error) {
	fs := newFlags(e, name, name+" [--home DIR] [--json]")
	home, asJSON := clientFlags(fs)
	if err := e.parseNone(fs, args); err != nil {
		return "", err
	}
	s, done, err := connect(e, *home)
	if err != nil {
		return "", err
	}
	defer done()
	if printed, err := s.fetch(e, typ, nil, *asJSON, out, what); printed || err != nil {
		return "", err
	}
	return s.c.Path(), nil
}

// fetch sends one request. With asJSON it prints the reply's payload and
// says so (printed); otherwise it decodes the reply into out, what naming
// the reply in the error when it is unreadable.
func (s *session) fetch(e *env, typ string, req any, asJSON bool, out any, what string) (printed bool, err error) {
	raw, err := s.c.Call(s.ctx, typ, req)
	if err != nil {
		return false, daemonErr(err)
	}
	if asJSON {
		return true, printPayload(e.stdout, raw)
	}
	if err := json.Unmarshal(raw, out); err != nil {
		return false, fmt.Errorf("daemon sent %s: %w", what, err)
	}
	return false, nil
}

// daemonErr renders an error reply as one line naming its code.
func daemonErr(err error) error {
	var e *ipc.Error
	if errors.As(err, &e) {
		if e.Code == ipc.CodeDiskFull {
			return fmt.Errorf("%s (%s): nothing was stored; reads still work. Free space on that file system; `cmbnode status` shows when the store writes again", e.Message, e.Code)
		}
		return fmt.Errorf("%s (%s)", e.Message, e.Code)
	}
	return err
}

// printPayload prints a reply without its envelope (type, action, id).
func printPayload(w io.Writer, raw json.RawMessage) error {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return fmt.Errorf("daemon sent an unreadable reply: %w", err)
	}
	delete(m, "type")
	delete(m, "action")
	delete(m, "id")
	return writeJSON(w, m)
}

// parseNone parses the flags of a command that takes no arguments.
func (e *env) parseNone(fs *flag.FlagSet, args []string) error {
	rest, err := e.parse(fs, args)
	if err != nil {
		return err
	}
	if len(rest) > 0 {
		return usagef("unexpected argument %q", rest[0])
	}
	return nil
}

func cmdStatus(e *env, args []string) error {
	var st ipc.StatusReply
	sock, err := request(e, args, "status", ipc.TypeStatus, &st, "an unreadable status")
	if sock == "" || err != nil {
		return err
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "node\t%s (%s)\n", st.NodeID, st.Name)
	fmt.Fprintf(tw, "version\t%s (MMP %s)\n", st.Version, st.ProtocolVersion)
	fmt.Fprintf(tw, "group\t%s\n", st.Group)
	fmt.Fprintf(tw, "peerId\t%s\n", cmp.Or(st.PeerID, "- (not on the mesh)"))
	if len(st.Addrs) == 0 {
		fmt.Fprintf(tw, "addrs\t-\n")
	}
	printRows(tw, "addrs", st.Addrs)
	fmt.Fprintf(tw, "peers\t%d\n", st.Peers)
	if st.PeerID != "" {
		fmt.Fprintf(tw, "bootstrap\t%s\n", bootstrapLine(st.Bootstrap))
	}
	if len(st.Refused) > 0 {
		fmt.Fprintf(tw, "refused\t%s\n", refusedLine(st.Refused))
	}
	if st.Sync != nil && st.Sync.Syncing {
		fmt.Fprintf(tw, "syncing\t%s\n", syncLine(*st.Sync))
	}
	// Labels stay within the widest one above (publicKey), so the
	// columns scripts read keep their place.
	if r := st.Reach; r != nil {
		how := "AutoNAT"
		if r.Forced {
			how = "set in config"
		}
		fmt.Fprintf(tw, "reach\t%s (%s)\n", r.Reachability, how)
		fmt.Fprintf(tw, "relays\t%s\n", cmp.Or(strings.Join(r.Relays, ", "), "-"))
		if r.RelayService {
			fmt.Fprintf(tw, "relaying\ton, for members (reservations granted %d, refused %d)\n", r.RelayReservations, r.RelayRefused)
		}
		fmt.Fprintf(tw, "holepunch\t%d succeeded, %d failed (%d attempts); %d peers moved to direct\n", r.HolePunchSuccesses, r.HolePunchFailures, r.HolePunchAttempts, r.Upgrades)
	}
	fmt.Fprintf(tw, "cmbs\t%d\n", st.CMBs)
	if s := st.Storage; s.DiskFull {
		fmt.Fprintf(tw, "storage\tDISK FULL: %s\n", s.Message)
	} else {
		fmt.Fprintf(tw, "storage\twritable\n")
	}
	fmt.Fprintf(tw, "publicKey\t%s\n", st.PublicKey)
	fmt.Fprintf(tw, "x25519\t%s\n", st.E2EPublicKey)
	fmt.Fprintf(tw, "socket\t%s (%d connected)\n", sock, st.SocketClients)
	c := st.Counters
	fmt.Fprintf(tw, "authored\t%d\n", c.Authored)
	fmt.Fprintf(tw, "received\t%d (accepted %d, duplicates %d, relayed %d, fetched %d, caught up %d)\n",
		c.Received, c.Accepted, c.Duplicates, c.Relayed, c.Fetched, c.CaughtUp)
	rej := fmt.Sprint(c.RejectedAll)
	if c.RejectedAll > 0 {
		parts := make([]string, 0, len(c.Rejected))
		for _, r := range c.RejectReasons() {
			parts = append(parts, fmt.Sprintf("%s %d", r, c.Rejected[r]))
		}
		rej += " (" + strings.Join(parts, ", ") + ")"
	}
	fmt.Fprintf(tw, "rejected\t%s\n", rej)
	fmt.Fprintf(tw, "svaf\t%s\n", svafLine(st.SVAF))
	if d := st.Dense; d != nil {
		fmt.Fprintf(tw, "dense\t%s (%d-d, fingerprint %s): %d indexed, %d pending, %d failed rounds\n",
			d.Kernel, d.Dim, d.Fingerprint, d.Indexed, d.Pending, d.Failures)
	}
	for _, c := range st.Conflicts {
		fmt.Fprintf(tw, "CONFLICT\tnodeId %s is claimed by %d keys (%s); its records are quarantined until `cmbnode trust %s KEY`\n",
			c.NodeID, len(c.Keys), strings.Join(c.Keys, ", "), c.NodeID)
	}
	if len(st.Quarantined) > 0 {
		fmt.Fprintf(tw, "quarantined\t%d records (admitted under an author key a handshake replaced)\n", len(st.Quarantined))
		for _, k := range st.Quarantined {
			fmt.Fprintf(tw, "\t%s\n", k)
		}
	}
	return tw.Flush()
}

// bootstrapLine says how the bootstrap dials fare: "1 configured, 0
// connected (last error: connection refused)".
func bootstrapLine(bs []node.BootstrapPeer) string {
	up, last := 0, ""
	for _, b := range bs {
		switch {
		case b.Connected:
			up++
		case last == "" && b.LastError != "":
			last = b.LastError
		}
	}
	line := fmt.Sprintf("%d configured, %d connected", len(bs), up)
	if last != "" {
		line += " (last error: " + last + ")"
	}
	return line
}

// svafLine lists the admission verdicts in the decisions' order (MMP
// §9.2): `aligned 12, guarded 1, redundant 3, rejected 0`.
func svafLine(counts map[string]int64) string {
	parts := make([]string, 0, len(svaf.Decisions()))
	for _, d := range svaf.Decisions() {
		parts = append(parts, fmt.Sprintf("%s %d", d, counts[string(d)]))
	}
	return strings.Join(parts, ", ")
}

// refusedLine says whom the handshake refused: `1 peer: group "alpha"`.
func refusedLine(rs []node.RefusedPeer) string {
	var why []string
	for _, r := range rs {
		w := "no valid group membership proof"
		switch r.Reason {
		case "group":
			w = fmt.Sprintf("group %q", r.Group)
		case "epoch":
			w = "group secret epoch expired"
		}
		if !slices.Contains(why, w) {
			why = append(why, w)
		}
	}
	peers := "peers"
	if len(rs) == 1 {
		peers = "peer"
	}
	return fmt.Sprintf("%d %s: %s", len(rs), peers, strings.Join(why, ", "))
}

func cmdPeers(e *env, args []string) error {
	var r struct {
		Peers     []node.PeerInfo `json:"peers"`
		Conflicts []node.Conflict `json:"conflicts"`
	}
	if sock, err := request(e, args, "peers", ipc.TypePeers, &r, "an unreadable peer list"); sock == "" || err != nil {
		return err
	}
	printConflicts(e, r.Conflicts)
	if len(r.Peers) == 0 {
		fmt.Fprintln(e.stdout, "no peers")
		return nil
	}
	// One block per peer, every address whole: each is a dialable
	// multiaddr ending in /p2p/<peerId>, to paste into --bootstrap.
	tw := tabwriter.NewWriter(e.stdout, 0, 0, 2, ' ', 0)
	for i, p := range r.Peers {
		if i > 0 {
			fmt.Fprintln(tw)
		}
		v := "MMP " + p.Version
		if p.Build != "" {
			v = p.Build + " (" + v + ")"
		}
		fmt.Fprintf(tw, "node\t%s (%s)\n", p.NodeID, truncate(p.Name, 64))
		fmt.Fprintf(tw, "group\t%s\n", p.Group)
		fmt.Fprintf(tw, "version\t%s\n", truncate(v, 60))
		fmt.Fprintf(tw, "peerId\t%s\n", p.PeerID)
		fmt.Fprintf(tw, "conn\t%s\n", cmp.Or(p.Conn, "-"))
		fmt.Fprintf(tw, "x25519\t%s\n", cmp.Or(p.E2EPublicKey, "-"))
		if len(p.Addrs) == 0 {
			fmt.Fprintf(tw, "addrs\t-\n")
		}
		printRows(tw, "addrs", p.Addrs)
	}
	return tw.Flush()
}

// floatFlag is a float flag that knows whether it was given.
type floatFlag struct {
	v   float64
	set bool
}

func (f *floatFlag) String() string {
	if !f.set {
		return ""
	}
	return strconv.FormatFloat(f.v, 'g', -1, 64)
}

func (f *floatFlag) Set(s string) error {
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(v) || v < -1 || v > 1 {
		return fmt.Errorf("%q is not a number in [-1, 1]", s)
	}
	f.v, f.set = v, true
	return nil
}

func cmdRemember(e *env, args []string) error {
	fs := newFlags(e, "remember", "remember --focus T [--issue T] [--intent T] [--motivation T] [--commitment T] [--perspective T] [--mood T] [--valence F] [--arousal F] [--parent KEY]… [--to PEER] [--home DIR] [--json]")
	home, asJSON := clientFlags(fs)
	texts := map[string]*string{}
	for _, name := range cmb.FieldNames {
		texts[name] = fs.String(name, "", "the "+name+" field (default \"neutral\")")
	}
	var valence, arousal floatFlag
	fs.Var(&valence, "valence", "mood valence in [-1, 1]")
	fs.Var(&arousal, "arousal", "mood arousal in [-1, 1]")
	var parents listFlag
	fs.Var(&parents, "parent", "key, or unique key prefix, of a record this one builds on (repeatable)")
	to := fs.String("to", "", "recipient: a nodeId, or the name of a peer (unique among peers); seal the record for that node only")
	if err := e.parseNone(fs, args); err != nil {
		return err
	}
	if strings.TrimSpace(*texts["focus"]) == "" {
		return usagef("--focus is required")
	}
	fields := map[string]any{}
	for name, v := range texts {
		if *v != "" && name != "mood" {
			fields[name] = *v
		}
	}
	if *texts["mood"] != "" || valence.set || arousal.set {
		mood := map[string]any{"text": *texts["mood"]}
		if valence.set {
			mood["valence"] = valence.v
		}
		if arousal.set {
			mood["arousal"] = arousal.v
		}
		fields["mood"] = mood
	}
	s, done, err := connect(e, *home)
	if err != nil {
		return err
	}
	defer done()
	res, err := s.c.Remember(s.ctx, ipc.RememberArgs{Fields: fields, Parents: parents, To: *to})
	if err != nil {
		return daemonErr(err)
	}
	if *asJSON {
		return writeJSON(e.stdout, res)
	}
	fmt.Fprintln(e.stdout, res.Key)
	switch {
	case !res.Duplicate:
	case res.Forgotten:
		fmt.Fprintln(e.stderr, "cmbnode remember: this memory was forgotten on this node; nothing was stored")
	case res.SameAuthor != nil && !*res.SameAuthor:
		fmt.Fprintln(e.stderr, "cmbnode remember: another author's record of the same text is held under this key; this node's is kept beside it as an assertion (see cmbnode get)")
	default:
		fmt.Fprintln(e.stderr, "cmbnode remember: the node already held this record")
	}
	return nil
}

func cmdRecall(e *env, args []string) error {
	fs := newFlags(e, "recall", "recall [--limit N] [--min-score S] [--home DIR] [--json] QUERY")
	home, asJSON := clientFlags(fs)
	limit := fs.Int("limit", 10, "at most this many results (1–1000)")
	minScore := fs.Float64("min-score", 0, "leave out results scoring below this (0–1; docs/recall.md)")
	rest, err := e.parse(fs, args)
	if err != nil {
		return err
	}
	query := strings.TrimSpace(strings.Join(rest, " "))
	if query == "" {
		return usagef("give a query, e.g. cmbnode recall \"release plan\"")
	}
	if *limit < 1 || *limit > 1000 {
		return usagef("--limit must be between 1 and 1000")
	}
	if !(*minScore >= 0 && *minScore <= 1) {
		return usagef("--min-score must be between 0 and 1")
	}
	s, done, err := connect(e, *home)
	if err != nil {
		return err
	}
	defer done()
	req := map[string]any{"query": query, "limit": *limit}
	if *minScore > 0 {
		req["min_score"] = *minScore
	}
	var r struct {
		Results []struct {
			Key       string                           `json:"key"`
			CreatedBy string                           `json:"createdBy"`
			CreatedAt int64                            `json:"createdAt"`
			Fields    map[string]struct{ Text string } `json:"fields"`
			Score     float64                          `json:"score"`
		} `json:"results"`
	}
	if printed, err := s.fetch(e, ipc.TypeRecall, req, *asJSON, &r, "unreadable results"); printed || err != nil {
		return err
	}
	if len(r.Results) == 0 {
		fmt.Fprintf(e.stdout, "no matches for %q\n", query)
		return nil
	}
	now := time.Now()
	tw := tabwriter.NewWriter(e.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SCORE\tAGE\tKEY\tFOCUS")
	for _, h := range r.Results {
		fmt.Fprintf(tw, "%.3f\t%s\t%s\t%s\n", h.Score, relTime(time.UnixMilli(h.CreatedAt), now), h.Key, truncate(h.Fields["focus"].Text, 60))
	}
	return tw.Flush()
}

// keyArg reads the one KEY argument: a full key or a unique prefix of one
// (git-style, at least 4 hex digits, "cmb1-" optional), which the daemon
// resolves against what it holds (node.ResolveKey).
func keyArg(rest []string, cmd string) (string, error) {
	if len(rest) != 1 {
		return "", usagef("give one key or a unique key prefix, e.g. cmbnode %s cmb1-997a0e72", cmd)
	}
	ref := strings.TrimSpace(rest[0])
	if ref == "" {
		return "", usagef("the key is empty")
	}
	return ref, nil
}

// keyCall parses a client command that takes one KEY|PREFIX and the
// client flags, and connects to the daemon.
func keyCall(e *env, name string, args []string) (key string, asJSON bool, s *session, done func(), err error) {
	fs := newFlags(e, name, name+" [--home DIR] [--json] KEY|PREFIX")
	home, jsonFlag := clientFlags(fs)
	rest, err := e.parse(fs, args)
	if err != nil {
		return "", false, nil, nil, err
	}
	if key, err = keyArg(rest, name); err != nil {
		return "", false, nil, nil, err
	}
	if s, done, err = connect(e, *home); err != nil {
		return "", false, nil, nil, err
	}
	return key, *jsonFlag, s, done, nil
}

func cmdGet(e *env, args []string) error {
	key, asJSON, s, done, err := keyCall(e, "get", args)
	if err != nil {
		return err
	}
	defer done()
	g, err := s.c.Get(s.ctx, key)
	if err != nil {
		return daemonErr(err)
	}
	if asJSON {
		// The record exactly as held (under "cmb") with its local metadata;
		// `cmbnode cmb verify` reads it as it is.
		return writeJSON(e.stdout, g)
	}
	rec, err := cmb.Decode(g.CMB)
	if err != nil {
		return fmt.Errorf("the daemon holds %s in a form this CLI cannot read: %w", key, err)
	}
	now := time.Now()
	tw := tabwriter.NewWriter(e.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "key\t%s\n", rec.Key)
	fmt.Fprintf(tw, "createdBy\t%s\n", rec.CreatedBy)
	created := time.UnixMilli(rec.CreatedAt)
	fmt.Fprintf(tw, "createdAt\t%s (%s)\n", created.UTC().Format(time.RFC3339), relTime(created, now))
	fmt.Fprintf(tw, "group\t%s\n", rec.Group)
	if rec.To != "" {
		fmt.Fprintf(tw, "to\t%s\n", rec.To)
	}
	printRows(tw, "parents", rec.Parents())
	fmt.Fprintf(tw, "stored\t%s, from %s\n", relTime(time.UnixMilli(g.StoredAt), now), g.Source)
	if !g.KeyConfirmed {
		fmt.Fprintf(tw, "authorKey\tunconfirmed (known only from gossip, never from a handshake)\n")
	}
	var alsoBy []string
	for _, a := range g.Assertions {
		alsoBy = append(alsoBy, fmt.Sprintf("%s, %s (their own signed record of the same text; --json has it)", a.CreatedBy, relTime(time.UnixMilli(a.CreatedAt), now)))
	}
	printRows(tw, "alsoBy", alsoBy)
	if rec.IsSealed() {
		fmt.Fprintf(tw, "fields\t(sealed)\n")
	} else {
		for i, name := range cmb.FieldNames {
			f := rec.Fields[i]
			text := truncate(f.Text, 200)
			if i == cmb.Mood && (f.Valence != nil || f.Arousal != nil) {
				var affect []string
				if f.Valence != nil {
					affect = append(affect, "valence "+strconv.FormatFloat(*f.Valence, 'g', -1, 64))
				}
				if f.Arousal != nil {
					affect = append(affect, "arousal "+strconv.FormatFloat(*f.Arousal, 'g', -1, 64))
				}
				text += " (" + strings.Join(affect, ", ") + ")"
			}
			fmt.Fprintf(tw, "%s\t%s\n", name, text)
		}
	}
	return tw.Flush()
}

func cmdLineage(e *env, args []string) error {
	fs := newFlags(e, "lineage", "lineage [--depth N] [--home DIR] [--json] KEY|PREFIX")
	home, asJSON := clientFlags(fs)
	depth := fs.Int("depth", 0, "hops to walk each way (0: all)")
	rest, err := e.parse(fs, args)
	if err != nil {
		return err
	}
	key, err := keyArg(rest, "lineage")
	if err != nil {
		return err
	}
	if *depth < 0 {
		return usagef("--depth must not be negative")
	}
	s, done, err := connect(e, *home)
	if err != nil {
		return err
	}
	defer done()
	var l struct {
		Key         string   `json:"key"`
		Ancestors   []string `json:"ancestors"`
		Descendants []string `json:"descendants"`
	}
	req := map[string]any{"key": key, "depth": *depth}
	if printed, err := s.fetch(e, ipc.TypeLineage, req, *asJSON, &l, "an unreadable lineage"); printed || err != nil {
		return err
	}
	fmt.Fprintln(e.stdout, l.Key) // resolved from a prefix
	now := time.Now()
	for _, part := range []struct {
		name string
		keys []string
	}{{"ancestors", l.Ancestors}, {"descendants", l.Descendants}} {
		fmt.Fprintf(e.stdout, "%s (%d, nearest first)\n", part.name, len(part.keys))
		tw := tabwriter.NewWriter(e.stdout, 0, 0, 2, ' ', 0)
		for i, k := range part.keys {
			if i == maxLineageShown {
				fmt.Fprintf(tw, "  … %d more (--json lists all)\n", len(part.keys)-i)
				break
			}
			fmt.Fprintf(tw, "  %s\t%s\n", k, s.summary(k, now))
		}
		tw.Flush()
	}
	return nil
}

// maxLineageShown bounds how many relatives the human output looks up.
const maxLineageShown = 50

// summary is "3m ago  focus…" for a held record, or why it cannot be shown.
func (s *session) summary(key string, now time.Time) string {
	g, err := s.c.Get(s.ctx, key)
	if err != nil {
		var e *ipc.Error
		if errors.As(err, &e) && e.Code == ipc.CodeNotFound {
			return "(not held here)"
		}
		return "(" + err.Error() + ")"
	}
	rec, err := cmb.Decode(g.CMB)
	if err != nil {
		return "(unreadable)"
	}
	if rec.IsSealed() {
		return relTime(time.UnixMilli(rec.CreatedAt), now) + "\t(sealed)"
	}
	return relTime(time.UnixMilli(rec.CreatedAt), now) + "\t" + truncate(rec.Fields[cmb.Focus].Text, 60)
}

// printRows writes one row of tw for each value, the first labeled name
// and the rest under it; no values, no rows.
func printRows(tw io.Writer, name string, values []string) {
	for i, v := range values {
		if i > 0 {
			name = ""
		}
		fmt.Fprintf(tw, "%s\t%s\n", name, v)
	}
}

// relTime says how long ago t was, coarsely: "just now", "42s ago",
// "3m ago", "5h ago", "2d ago"; beyond 30 days, or in the future, the date.
func relTime(t, now time.Time) string {
	d := now.Sub(t)
	switch {
	case d < -time.Minute:
		return t.UTC().Format("2006-01-02")
	case d < 5*time.Second:
		return "just now"
	case d < time.Minute:
		return fmt.Sprintf("%ds ago", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm ago", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh ago", int(d.Hours()))
	case d < 30*24*time.Hour:
		return fmt.Sprintf("%dd ago", int(d.Hours()/24))
	}
	return t.UTC().Format("2006-01-02")
}

// truncate shortens s to n runes with an ellipsis, on one line.
func truncate(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return strings.TrimSpace(string(r[:n-1])) + "…"
}

// printConflicts warns of nodeIds two keys claim, with the command that
// ends each conflict.
func printConflicts(e *env, cs []node.Conflict) {
	for _, c := range cs {
		fmt.Fprintf(e.stdout, "CONFLICT: nodeId %s is claimed by %d keys; its records are quarantined until you pick one:\n", c.NodeID, len(c.Keys))
		for i, k := range c.Keys {
			fmt.Fprintf(e.stdout, "  cmbnode trust %s %s   # %s\n", c.NodeID, k, truncate(c.Names[i], 24))
		}
	}
}

func cmdTrust(e *env, args []string) error {
	fs := newFlags(e, "trust", "trust [--home DIR] [--json] NODEID KEY")
	home, asJSON := clientFlags(fs)
	rest, err := e.parse(fs, args)
	if err != nil {
		return err
	}
	if len(rest) != 2 {
		return usagef("trust takes a nodeId and the Ed25519 key to pin for it (as `cmbnode peers` lists a conflict)")
	}
	s, done, err := connect(e, *home)
	if err != nil {
		return err
	}
	defer done()
	var res node.TrustResult
	req := map[string]any{"nodeId": rest[0], "key": rest[1]}
	if _, err := s.fetch(e, ipc.TypeTrust, req, false, &res, "an unreadable trust result"); err != nil {
		return err
	}
	if *asJSON {
		return writeJSON(e.stdout, res)
	}
	what := "pinned"
	if res.Resolved {
		what = "conflict resolved: pinned"
	}
	fmt.Fprintf(e.stdout, "%s %s for %s; %d record(s) it signed surfaced, %d signed by another key quarantined\n",
		what, res.Key, res.NodeID, res.Unquarantined, res.Quarantined)
	return nil
}
