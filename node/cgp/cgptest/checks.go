package cgptest

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/cmbnode/cmbnode/node/cgp"
)

func pass(name, format string, args ...any) Check {
	return Check{name, Pass, fmt.Sprintf(format, args...)}
}
func fail(name, format string, args ...any) Check {
	return Check{name, Fail, fmt.Sprintf(format, args...)}
}
func skip(name, format string, args ...any) Check {
	return Check{name, Skip, fmt.Sprintf(format, args...)}
}

func family(v string) string {
	f, _, _ := strings.Cut(v, ".")
	return f
}

func (r *runner) checkHandshake(c Conn) Check {
	t0 := time.Now()
	ack, _, err := r.handshake(c, r.opts.HostVersion)
	if err != nil {
		return fail(CheckHandshake, "%v", err)
	}
	r.ack = ack
	if !strings.HasPrefix(ack.ProtocolVersion, "contextgraph/") || family(ack.ProtocolVersion) != family(r.opts.HostVersion) {
		return fail(CheckHandshake, "ack protocol_version %q is not in the host family %q (H1)", ack.ProtocolVersion, family(r.opts.HostVersion))
	}
	if strings.TrimSpace(ack.Provider.Name) == "" || strings.TrimSpace(ack.Provider.Version) == "" {
		return fail(CheckHandshake, "provider name/version empty after trim (H2)")
	}
	return pass(CheckHandshake, "%s %s acked %s in %v", ack.Provider.Name, ack.Provider.Version, ack.ProtocolVersion, time.Since(t0).Round(time.Millisecond))
}

func isBaseScope(s string) bool {
	switch s {
	case "local-only", "org-tenant", "third-party-index", "third-party-model":
		return true
	}
	return false
}

func (r *runner) checkConsentScope() Check {
	df := r.ack.Provider.DataFlow
	for _, s := range df.EgressScopes {
		if !isBaseScope(s) {
			a, b, ok := strings.Cut(s, ":")
			if !ok || a == "" || b == "" || strings.Contains(b, ":") {
				return fail(CheckConsentScope, "scope %q is neither a base scope nor vendor:name", s)
			}
		}
		if s != "local-only" && !df.Egress {
			return fail(CheckConsentScope, "off-machine scope %q declared with egress:false (C5)", s)
		}
	}
	return pass(CheckConsentScope, "egress=%v scopes=%v", df.Egress, df.EgressScopes)
}

// ValidateFrame applies the frame-validity rules (F1-F5, P1-P3, D1, G1/G2,
// token_cost present) to one frame's JSON and returns every problem. Full
// frames also get their content_digest recomputed from content (D1 binds
// the digest to the inline bytes).
func ValidateFrame(raw []byte) []string {
	var f frameView
	if err := json.Unmarshal(raw, &f); err != nil {
		return []string{"frame does not decode: " + err.Error()}
	}
	return validateFrame(f)
}

func validateFrame(f frameView) []string {
	var p []string
	bad := func(format string, args ...any) {
		p = append(p, fmt.Sprintf("%s: ", f.ID)+fmt.Sprintf(format, args...))
	}
	if f.decodeErr != nil {
		return []string{"frame does not decode: " + f.decodeErr.Error()}
	}
	if f.ID == "" {
		bad("empty id")
	}
	if f.Kind == "" {
		bad("empty kind")
	}
	if f.Score == nil || math.IsNaN(*f.Score) || *f.Score < 0 || *f.Score > 1 {
		bad("score %v outside [0,1] (F1)", ptrVal(f.Score))
	}
	if f.TokenCost == nil || *f.TokenCost < 0 || *f.TokenCost != math.Trunc(*f.TokenCost) || *f.TokenCost > math.MaxUint32 {
		bad("token_cost %v is not a u32", ptrVal(f.TokenCost))
	}
	if f.Title == nil || strings.TrimSpace(*f.Title) == "" {
		bad("title empty after trim (F2)")
	}
	if f.CitationLabel == nil || strings.TrimSpace(*f.CitationLabel) == "" {
		bad("citation_label empty after trim (F3)")
	}
	rep := "full"
	if f.Representation != nil {
		rep = *f.Representation
	}
	has := func(r json.RawMessage) bool { return len(r) > 0 && string(r) != "null" }
	switch rep {
	case "full":
		if f.Content == nil {
			bad("full frame without content (P1)")
		}
		if has(f.ContentRef) || has(f.Transform) || f.CanonicalContentHash != nil {
			bad("full frame carries content_ref/transform/canonical_content_hash (P1)")
		}
		if f.Content != nil && f.ContentDigest != nil && cgp.IsDigest(*f.ContentDigest) && *f.ContentDigest != cgp.DigestBytes([]byte(*f.Content)) {
			bad("content_digest does not hash the inline content (D1)")
		}
	case "compact":
		if f.Content == nil || f.ContentDigest == nil || f.CanonicalContentHash == nil || !has(f.Transform) || !has(f.ContentRef) {
			bad("compact frame misses content/content_digest/canonical_content_hash/transform/content_ref (P2)")
		}
	case "reference":
		if !has(f.ContentRef) || f.CanonicalContentHash == nil {
			bad("reference frame misses content_ref/canonical_content_hash (P3)")
		}
		if f.Content != nil || f.ContentDigest != nil || has(f.Transform) {
			bad("reference frame carries content/content_digest/transform (P3)")
		}
	default:
		bad("unknown representation %q", rep)
	}
	for name, ts := range map[string]*string{"valid_from": f.ValidFrom, "valid_to": f.ValidTo, "recorded_at": f.RecordedAt} {
		if ts != nil && !cgp.IsTimestamp(*ts) {
			bad("%s %q violates F4", name, *ts)
		}
	}
	if f.ContentDigest != nil && !cgp.IsDigest(*f.ContentDigest) {
		bad("content_digest %q violates D1", *f.ContentDigest)
	}
	for i, l := range f.Provenance {
		if l.Type == "" {
			bad("provenance[%d] has no type", i)
		}
		if l.Type == "file" && (l.Digest == nil || !cgp.IsDigest(*l.Digest)) {
			bad("file provenance[%d] without a sha256 digest (F5)", i)
		}
	}
	for i, rel := range f.Relations {
		if rel.TargetURI == "" {
			bad("relations[%d] empty target_uri (G2)", i)
		}
		if rel.DisplayName == nil || strings.TrimSpace(*rel.DisplayName) == "" {
			bad("relations[%d] empty display_name (G1)", i)
		}
	}
	return p
}

func ptrVal(f *float64) any {
	if f == nil {
		return "absent"
	}
	return *f
}

func (r *runner) checkFrameValidity(_ Conn, sampleErr error) Check {
	if sampleErr != nil {
		return fail(CheckFrameValidity, "sample query failed: %v", sampleErr)
	}
	var probs []string
	for _, f := range r.sample.Frames {
		probs = append(probs, validateFrame(f)...)
	}
	if len(probs) > 0 {
		return fail(CheckFrameValidity, "%d problems; first: %s", len(probs), probs[0])
	}
	return pass(CheckFrameValidity, "%d frames valid", len(r.sample.Frames))
}

func contentCost(f frameView) uint64 {
	if f.Content == nil {
		return 0
	}
	return uint64(len(*f.Content)+3) / 4
}

// budgetProblems checks B1, B3 and B4 on one result.
func budgetProblems(res *resultView, maxFrames, maxTokens uint64) []string {
	var p []string
	var sum uint64
	for _, f := range res.Frames {
		if f.TokenCost == nil {
			p = append(p, f.ID+": no token_cost")
			continue
		}
		if want := contentCost(f); uint64(*f.TokenCost) != want || *f.TokenCost != math.Trunc(*f.TokenCost) {
			p = append(p, fmt.Sprintf("%s: token_cost %v, B3 gives %d", f.ID, *f.TokenCost, want))
		}
		sum += uint64(*f.TokenCost)
	}
	if sum > maxTokens {
		p = append(p, fmt.Sprintf("sum of token_cost %d > max_tokens %d (B1)", sum, maxTokens))
	}
	if uint64(len(res.Frames)) > maxFrames {
		p = append(p, fmt.Sprintf("%d frames > max_frames %d (B4)", len(res.Frames), maxFrames))
	}
	return p
}

func (r *runner) checkBudgetHonesty(_ Conn, sampleErr error) Check {
	if sampleErr != nil {
		return fail(CheckBudgetHonesty, "sample query failed: %v", sampleErr)
	}
	if p := budgetProblems(r.sample, 8, 4096); len(p) > 0 {
		return fail(CheckBudgetHonesty, "%s", strings.Join(p, "; "))
	}
	return pass(CheckBudgetHonesty, "%d frames within 8/4096, costs exact", len(r.sample.Frames))
}

type verdictView struct {
	Frame             cgp.FrameID `json:"frame"`
	Status            string      `json:"status"`
	ReplacementDigest *string     `json:"replacement_digest"`
}

func (r *runner) verify(c Conn, ids []cgp.FrameID) (map[string]string, error) {
	req, _ := json.Marshal(map[string]any{"type": "verify", "request": map[string]any{"frames": ids}})
	if err := c.Send(req); err != nil {
		return nil, err
	}
	b, err := r.recv(c, r.opts.QueryTimeout)
	if err != nil {
		return nil, err
	}
	var v struct {
		Type     string `json:"type"`
		Response struct {
			Verdicts []verdictView `json:"verdicts"`
		} `json:"response"`
	}
	if err := json.Unmarshal(b, &v); err != nil || v.Type != cgp.TypeVerified {
		return nil, fmt.Errorf("reply is not verified: %.300s", b)
	}
	out := map[string]string{}
	for _, vd := range v.Response.Verdicts {
		out[idKey(vd.Frame)] = vd.Status
	}
	return out, nil
}

func idKey(id cgp.FrameID) string {
	d := "<absent>"
	if id.ContentDigest != nil {
		d = *id.ContentDigest
	}
	return id.ProviderID + "\x00" + id.FrameID + "\x00" + d
}

func (r *runner) digestIDs(provider, suffix string) []cgp.FrameID {
	var ids []cgp.FrameID
	for _, f := range r.sample.Frames {
		if f.ContentDigest != nil {
			d := *f.ContentDigest + suffix
			ids = append(ids, cgp.FrameID{ProviderID: provider, FrameID: f.ID, ContentDigest: &d})
		}
	}
	return ids
}

func (r *runner) checkVerifyHonesty(c Conn, sampleErr error) Check {
	if !r.ack.Capabilities.Verify {
		return skip(CheckVerifyHonesty, "verify not declared")
	}
	if sampleErr != nil {
		return fail(CheckVerifyHonesty, "sample query failed: %v", sampleErr)
	}
	for _, round := range []struct{ suffix, want string }{{"", cgp.StatusValid}, {"-contextgraph-conformance-mutated", cgp.StatusStale}} {
		ids := r.digestIDs(r.ack.Provider.Name, round.suffix)
		if len(ids) == 0 {
			return skip(CheckVerifyHonesty, "no served frame carries a digest")
		}
		got, err := r.verify(c, ids)
		if err != nil {
			return fail(CheckVerifyHonesty, "verify: %v", err)
		}
		for _, id := range ids {
			st, ok := got[idKey(id)]
			if !ok {
				st = "missing (unknown)"
			}
			if st != round.want {
				return fail(CheckVerifyHonesty, "%s with digest%s: %s, want %s", id.FrameID, round.suffix, st, round.want)
			}
		}
	}
	return pass(CheckVerifyHonesty, "%d frames valid, then stale when mutated", len(r.digestIDs("", "")))
}

func (r *runner) checkVerifyUnknown(c Conn, sampleErr error) Check {
	if !r.ack.Capabilities.Verify {
		return skip(CheckVerifyUnknownFrame, "verify not declared")
	}
	d := cgp.DigestBytes([]byte("never served"))
	never := cgp.FrameID{ProviderID: r.ack.Provider.Name, FrameID: "cgptest:never-served-frame", ContentDigest: &d}
	ids := []cgp.FrameID{never}
	// V5: an old host sends its local id; a real frame must not come back
	// stale or gone for that reason alone.
	local := r.digestIDs("provider-under-test", "")
	if len(local) > 0 {
		ids = append(ids, local[0])
	}
	got, err := r.verify(c, ids)
	if err != nil {
		return fail(CheckVerifyUnknownFrame, "verify: %v", err)
	}
	if st := got[idKey(never)]; st != cgp.StatusGone && st != cgp.StatusUnknown {
		return fail(CheckVerifyUnknownFrame, "never-served frame answered %q, want gone or unknown", st)
	}
	if len(local) > 0 {
		if st := got[idKey(local[0])]; st != cgp.StatusValid && st != cgp.StatusUnknown {
			return fail(CheckVerifyUnknownFrame, "served frame under a foreign provider_id answered %q, want valid or unknown (V5)", st)
		}
	}
	return pass(CheckVerifyUnknownFrame, "never-served frame: %s", got[idKey(never)])
}

// asOfPins are the instants the as-of check pins; the fractional one only
// sorts correctly when compared as an instant.
func asOfPins() []string {
	return []string{"2026-07-01T00:00:00Z", "2026-10-01T00:00:00Z", "2026-08-15T12:00:00.5Z"}
}

func (r *runner) checkAsOf(c Conn, _ error) Check {
	total := 0
	for _, pin := range asOfPins() {
		at, _ := cgp.ParseTime(pin)
		res, err := r.query(c, queryWith(map[string]any{"as_of": pin}), "")
		if err != nil {
			return fail(CheckAsOfTemporal, "as_of %s: %v", pin, err)
		}
		for _, f := range res.Frames {
			total++
			if f.ValidFrom != nil {
				vf, err := cgp.ParseTime(*f.ValidFrom)
				if err != nil || vf.After(at) {
					return fail(CheckAsOfTemporal, "%s: valid_from %s is after as_of %s (Q2)", f.ID, *f.ValidFrom, pin)
				}
			}
			if f.ValidTo != nil {
				vt, err := cgp.ParseTime(*f.ValidTo)
				if err != nil || !at.Before(vt) {
					return fail(CheckAsOfTemporal, "%s: valid_to %s does not exceed as_of %s (Q2, half-open)", f.ID, *f.ValidTo, pin)
				}
			}
		}
	}
	return pass(CheckAsOfTemporal, "%d frames over %d pins all contain their pin", total, len(asOfPins()))
}

func (r *runner) checkKinds(c Conn, _ error) Check {
	kinds := r.ack.Capabilities.Query.Kinds
	if len(kinds) == 0 {
		return skip(CheckKindsFilter, "no kinds declared")
	}
	var ev []string
	for _, k := range kinds {
		res, err := r.query(c, queryWith(map[string]any{"kinds": []string{k}}), "")
		if err != nil {
			return fail(CheckKindsFilter, "kinds [%s]: %v", k, err)
		}
		for _, f := range res.Frames {
			if f.Kind != k {
				return fail(CheckKindsFilter, "kinds [%s] returned %s of kind %q (Q1)", k, f.ID, f.Kind)
			}
		}
		ev = append(ev, fmt.Sprintf("%s:%d", k, len(res.Frames)))
	}
	res, err := r.query(c, queryWith(map[string]any{"kinds": []string{"future-kind"}}), "")
	if err != nil {
		return fail(CheckKindsFilter, "kinds [future-kind] must return zero frames, not fail (U2): %v", err)
	}
	if len(res.Frames) > 0 {
		return fail(CheckKindsFilter, "kinds [future-kind] returned %d frames (Q1)", len(res.Frames))
	}
	return pass(CheckKindsFilter, "%s; future-kind:0", strings.Join(ev, " "))
}

func anchored(f frameView, a string) bool {
	if f.URI != nil && *f.URI == a {
		return true
	}
	for _, rel := range f.Relations {
		if rel.TargetURI == a {
			return true
		}
	}
	return false
}

func (r *runner) checkAnchors(c Conn, sampleErr error) Check {
	if !r.ack.Capabilities.Graph {
		return skip(CheckAnchorRelevance, "graph not declared")
	}
	if sampleErr != nil {
		return fail(CheckAnchorRelevance, "sample query failed: %v", sampleErr)
	}
	anchor := ""
	for _, f := range r.sample.Frames {
		if len(f.Relations) > 0 {
			anchor = f.Relations[0].TargetURI
			break
		}
	}
	if anchor == "" {
		for _, f := range r.sample.Frames {
			if f.URI != nil && *f.URI != "" {
				anchor = *f.URI
				break
			}
		}
	}
	if anchor == "" {
		return skip(CheckAnchorRelevance, "sample result offers no uri to anchor on")
	}
	res, err := r.query(c, queryWith(map[string]any{"anchors": []string{anchor}}), "")
	if err != nil {
		return fail(CheckAnchorRelevance, "anchored query: %v", err)
	}
	for i, f := range res.Frames {
		if anchored(f, anchor) {
			return pass(CheckAnchorRelevance, "anchored frame %s at rank %d of %d (G3 %v)", f.ID, i+1, len(res.Frames), i == 0)
		}
	}
	return fail(CheckAnchorRelevance, "no returned frame is anchored by %s (G4)", anchor)
}

func (r *runner) checkProvenanceFixture(_ Conn, sampleErr error) Check {
	if sampleErr != nil {
		return fail(CheckProvenanceFixture, "sample query failed: %v", sampleErr)
	}
	checked := 0
	for _, f := range r.sample.Frames {
		for _, l := range f.Provenance {
			if l.Type != "file" || l.URI == nil || l.Digest == nil || !strings.HasPrefix(*l.URI, "file://") {
				continue
			}
			data, err := os.ReadFile(strings.TrimPrefix(*l.URI, "file://"))
			if err != nil {
				continue
			}
			b, err := cgp.AddressRange(data, l.Range)
			if err != nil {
				return fail(CheckProvenanceFixture, "%s: range %v: %v", f.ID, l.Range, err)
			}
			if cgp.DigestBytes(b) != *l.Digest {
				return fail(CheckProvenanceFixture, "%s: %s digest mismatch", f.ID, *l.URI)
			}
			checked++
		}
	}
	if checked == 0 {
		return skip(CheckProvenanceFixture, "no readable file:// provenance")
	}
	return pass(CheckProvenanceFixture, "%d file links re-hashed", checked)
}

func (r *runner) checkAttestation(_ Conn, sampleErr error) Check {
	if len(r.ack.AttesterKeys) == 0 {
		return skip(CheckAttestation, "no attester_keys published")
	}
	if sampleErr != nil {
		return fail(CheckAttestation, "sample query failed: %v", sampleErr)
	}
	res := r.sample
	if len(res.FrameAttestations) == 0 && res.ResultAttestation == nil {
		return skip(CheckAttestation, "keys published but the sample result carries no attestations")
	}
	keys := map[string]cgp.AttesterKey{}
	for _, k := range r.ack.AttesterKeys {
		keys[k.KeyID] = k
	}
	name := r.ack.Provider.Name
	carried := map[string]frameView{}
	var commits []struct {
		id cgp.FrameID
		c  [32]byte
	}
	for _, f := range res.Frames {
		id := cgp.FrameID{ProviderID: name, FrameID: f.ID, ContentDigest: f.ContentDigest}
		carried[idKey(id)] = f
		commits = append(commits, struct {
			id cgp.FrameID
			c  [32]byte
		}{id, cgp.FrameCommitment(name, f.ID, f.ContentDigest, f.Provenance)})
	}
	verifyWith := func(a cgp.Attestation, expected [32]byte) error {
		k, ok := keys[a.KeyID]
		if !ok {
			return fmt.Errorf("key_id %q is not published", a.KeyID)
		}
		return cgp.VerifyAttestation(a, expected, k)
	}
	// Result root over exactly the carried frames, canonical order (F12).
	sortCommits := func() [][32]byte {
		for i := 1; i < len(commits); i++ {
			for j := i; j > 0 && cgp.CompareFrameIDs(commits[j].id, commits[j-1].id) < 0; j-- {
				commits[j], commits[j-1] = commits[j-1], commits[j]
			}
		}
		out := make([][32]byte, len(commits))
		for i, c := range commits {
			out[i] = c.c
		}
		return out
	}
	root := cgp.MerkleRoot(sortCommits())
	if res.ResultAttestation != nil {
		if err := verifyWith(*res.ResultAttestation, root); err != nil {
			return fail(CheckAttestation, "result_attestation: %v", err)
		}
	}
	signed := 0
	for i, fa := range res.FrameAttestations {
		f, ok := carried[idKey(fa.Frame)]
		if !ok {
			return fail(CheckAttestation, "frame_attestations[%d] names %s, not a carried frame of %s (F11)", i, fa.Frame.FrameID, name)
		}
		commit := cgp.FrameCommitment(name, f.ID, f.ContentDigest, f.Provenance)
		if fa.Attestation != nil {
			if err := verifyWith(*fa.Attestation, commit); err != nil {
				kind := "CommitmentMismatch"
				if errors.Is(err, cgp.ErrBadSignature) {
					kind = "BadSignature"
				}
				return fail(CheckAttestation, "%s: %s: %v", f.ID, kind, err)
			}
			signed++
		}
		if fa.InclusionProof != nil {
			if fa.InclusionProof.LeafCount != len(res.Frames) {
				return fail(CheckAttestation, "%s: inclusion leaf_count %d != %d frames (F13)", f.ID, fa.InclusionProof.LeafCount, len(res.Frames))
			}
			if err := cgp.VerifyInclusion(commit, *fa.InclusionProof, root); err != nil {
				return fail(CheckAttestation, "%s: inclusion proof: %v (F13)", f.ID, err)
			}
		}
	}
	return pass(CheckAttestation, "%d frame signatures and the result root verify under %s", signed, r.ack.AttesterKeys[0].KeyID)
}

func (r *runner) checkTightBudget(c Conn, sampleErr error) Check {
	if sampleErr != nil {
		return fail(CheckTightBudget, "sample query failed: %v", sampleErr)
	}
	budgets := [][2]uint64{{1, 10}, {3, 60}, {8, 0}, {0, 4096}, {8, 200}}
	var ev []string
	for _, b := range budgets {
		res, err := r.query(c, queryWith(map[string]any{"max_frames": b[0], "max_tokens": b[1]}), "")
		if err != nil {
			return fail(CheckTightBudget, "%d/%d: %v", b[0], b[1], err)
		}
		if p := budgetProblems(res, b[0], b[1]); len(p) > 0 {
			return fail(CheckTightBudget, "%d/%d: %s", b[0], b[1], strings.Join(p, "; "))
		}
		// The sample's frames were candidates for this same query; if fewer
		// came back, something was left out and truncated must say so.
		if len(res.Frames) < len(r.sample.Frames) && !*res.Truncated {
			return fail(CheckTightBudget, "%d/%d: %d frames vs %d unbounded, yet truncated:false", b[0], b[1], len(res.Frames), len(r.sample.Frames))
		}
		if res.DroppedEstimate != nil && *res.DroppedEstimate > 0 && !*res.Truncated {
			return fail(CheckTightBudget, "%d/%d: dropped_estimate %v with truncated:false", b[0], b[1], *res.DroppedEstimate)
		}
		ev = append(ev, fmt.Sprintf("%d/%d→%d", b[0], b[1], len(res.Frames)))
	}
	return pass(CheckTightBudget, "%s", strings.Join(ev, " "))
}

func (r *runner) checkUnknownMembers(c Conn, sampleErr error) Check {
	q := map[string]any{}
	_ = json.Unmarshal([]byte(SampleQuery), &q)
	q["future_field"] = true
	q["x_ext"] = map[string]any{"deep": map[string]any{"deeper": []any{map[string]any{"k": "v"}, nil}}}
	env, _ := json.Marshal(map[string]any{"type": "query", "query": q, "future_envelope_member": map[string]any{"a": []int{1}}})
	if err := c.Send(env); err != nil {
		return fail(CheckUnknownMembers, "send: %v", err)
	}
	b, err := r.recv(c, r.opts.QueryTimeout)
	if err != nil {
		return fail(CheckUnknownMembers, "reply: %v", err)
	}
	v, _ := decodeReply(b)
	if v.Type != cgp.TypeFrames {
		return fail(CheckUnknownMembers, "query with unknown members got %q, want frames (U1): %.200s", v.Type, b)
	}
	res, err := decodeResult(v.Result)
	if err != nil {
		return fail(CheckUnknownMembers, "result: %v", err)
	}
	if sampleErr == nil && len(r.sample.Frames) > 0 && len(res.Frames) == 0 {
		return fail(CheckUnknownMembers, "unknown members emptied a non-empty answer")
	}
	return pass(CheckUnknownMembers, "answered with %d frames", len(res.Frames))
}

func (r *runner) checkUnknownTypes(c Conn, _ error) Check {
	if err := c.Send([]byte(`{"type":"frobnicate","id":"cgp-unknown-7","x":{"y":1}}`)); err != nil {
		return fail(CheckUnknownTypes, "send: %v", err)
	}
	b, err := r.recv(c, r.opts.QueryTimeout)
	if err != nil {
		return fail(CheckUnknownTypes, "unknown request with id got no reply: %v", err)
	}
	v, _ := decodeReply(b)
	if v.Type != cgp.TypeError || v.Code == nil || *v.Code != cgp.CodeBadRequest {
		return fail(CheckUnknownTypes, "unknown request with id: want error bad_request, got %.200s", b)
	}
	if r.ack.Capabilities.Correlation && (v.ID == nil || *v.ID != "cgp-unknown-7") {
		return fail(CheckUnknownTypes, "error for unknown request does not echo its id (H4)")
	}
	// Notifications (no id) and provider-only envelopes get silence: the
	// next reply must answer the next request.
	for _, n := range []string{`{"type":"frobnicate"}`, `{"type":"frames","result":{"frames":[],"truncated":false}}`} {
		if err := c.Send([]byte(n)); err != nil {
			return fail(CheckUnknownTypes, "send: %v", err)
		}
		if !r.t.Stdio() {
			if _, err := r.recv(c, 0); err == nil {
				return fail(CheckUnknownTypes, "HTTP notification %s got a reply body", n)
			}
		}
	}
	res, err := r.query(c, SampleQuery, "")
	if err != nil {
		return fail(CheckUnknownTypes, "after unknown notifications, the next reply is not the query's frames: %v", err)
	}
	return pass(CheckUnknownTypes, "bad_request for the request, silence for notifications, then %d frames", len(res.Frames))
}

func (r *runner) checkMalformed() Check {
	c, err := r.openHandshaken()
	if err != nil {
		return fail(CheckMalformedInput, "fresh provider: %v", err)
	}
	defer c.Close(r.opts.ShutdownGrace)
	if err := c.Send([]byte("this is not valid json {{{")); err != nil {
		return fail(CheckMalformedInput, "send garbage: %v", err)
	}
	if !r.t.Stdio() {
		st := c.LastStatus()
		b, err := r.recv(c, 0)
		if err != nil || (st != http.StatusBadRequest && st != http.StatusOK) {
			return fail(CheckMalformedInput, "garbage POST: status %d, %v", st, err)
		}
		if v, _ := decodeReply(b); v.Type != cgp.TypeError || v.Code == nil || *v.Code != cgp.CodeBadRequest {
			return fail(CheckMalformedInput, "garbage POST answered %.200s, want bad_request", b)
		}
	}
	if err := c.Send([]byte(`{"type":"query","query":` + SampleQuery + `}`)); err != nil {
		return fail(CheckMalformedInput, "send query: %v", err)
	}
	b, err := r.recv(c, r.opts.QueryTimeout)
	if err != nil {
		return fail(CheckMalformedInput, "no reply after garbage (provider died?): %v", err)
	}
	v, _ := decodeReply(b)
	switch {
	case v.Type == cgp.TypeFrames:
		return pass(CheckMalformedInput, "garbage ignored; query answered")
	case v.Type == cgp.TypeError && v.Code != nil && *v.Code == cgp.CodeBadRequest:
		return pass(CheckMalformedInput, "garbage answered bad_request")
	}
	return fail(CheckMalformedInput, "first reply after garbage: %.200s", b)
}

func (r *runner) checkEmbeddingFP() Check {
	fp := r.ack.Capabilities.EmbeddingsFingerprint
	if fp == nil || *fp == "" {
		return skip(CheckEmbeddingFP, "no embeddings_fingerprint declared")
	}
	parts := strings.Split(*fp, "/")
	dims, _ := strconv.Atoi(parts[min(1, len(parts)-1)])
	vec := []float64{0.5}
	if dims == 1 {
		vec = []float64{0.5, 0.5}
	}
	return r.expectEmbeddingError(CheckEmbeddingFP, vec)
}

func (r *runner) checkEmbeddingUndeclared() Check {
	if fp := r.ack.Capabilities.EmbeddingsFingerprint; fp != nil && *fp != "" {
		return skip(CheckEmbeddingUndecl, "a fingerprint is declared; see embedding-fingerprint")
	}
	return r.expectEmbeddingError(CheckEmbeddingUndecl, []float64{0.5})
}

func (r *runner) expectEmbeddingError(name string, vec []float64) Check {
	c, err := r.openHandshaken()
	if err != nil {
		return fail(name, "fresh provider: %v", err)
	}
	defer c.Close(r.opts.ShutdownGrace)
	_, err = r.query(c, queryWith(map[string]any{"embedding": vec}), "")
	if err == nil {
		return fail(name, "a %d-element embedding the provider cannot interpret was answered with frames (E1)", len(vec))
	}
	if strings.Contains(err.Error(), `"code":"bad_request"`) {
		return pass(name, "bad_request")
	}
	if strings.Contains(err.Error(), `reply is "error"`) {
		return pass(name, "error (not bad_request): %v", err)
	}
	return fail(name, "%v", err)
}

func (r *runner) checkCorrelation() Check {
	if !r.ack.Capabilities.Correlation {
		return skip(CheckCorrelation, "correlation not declared")
	}
	c, err := r.openHandshaken()
	if err != nil {
		return fail(CheckCorrelation, "fresh provider: %v", err)
	}
	defer c.Close(r.opts.ShutdownGrace)
	const id = "cgp-conformance-h4-7f3a"
	res, err := r.query(c, SampleQuery, id)
	if err != nil {
		return fail(CheckCorrelation, "%v", err)
	}
	if res.ID == nil || *res.ID != id {
		return fail(CheckCorrelation, "frames reply id %v, want %q (H4)", res.ID, id)
	}
	if err := c.Send([]byte(`{"type":"query","id":"cgp-h4-error","query":{"goal":"x","max_frames":1}}`)); err != nil {
		return fail(CheckCorrelation, "send: %v", err)
	}
	b, err := r.recv(c, r.opts.QueryTimeout)
	if err != nil {
		return fail(CheckCorrelation, "invalid query got no reply: %v", err)
	}
	v, _ := decodeReply(b)
	if v.Type != cgp.TypeError || v.ID == nil || *v.ID != "cgp-h4-error" {
		return fail(CheckCorrelation, "invalid query with id: want an error echoing it, got %.200s", b)
	}
	return pass(CheckCorrelation, "id echoed on frames and on error")
}

func (r *runner) checkVersionMismatch() Check {
	c, err := r.t.Open(r.ctx)
	if err != nil {
		return fail(CheckVersionMismatch, "fresh provider: %v", err)
	}
	defer c.Close(r.opts.ShutdownGrace)
	_, v, err := r.handshake(c, "contextgraph/2.0")
	if err == nil {
		return fail(CheckVersionMismatch, "contextgraph/2.0 handshake was acked (H3)")
	}
	if v.Type == cgp.TypeError && v.Code != nil && *v.Code == cgp.CodeIncompatibleVersion {
		return pass(CheckVersionMismatch, "incompatible_version: %s", v.Message)
	}
	return fail(CheckVersionMismatch, "want error incompatible_version: %v", err)
}

func (r *runner) checkRobustness() Check {
	c, err := r.t.Open(r.ctx)
	if err != nil {
		return fail(CheckRobustness, "fresh provider: %v", err)
	}
	defer c.Close(r.opts.ShutdownGrace)
	// A query before the handshake: an error or frames, never a crash.
	if err := c.Send([]byte(`{"type":"query","query":` + SampleQuery + `}`)); err != nil {
		return fail(CheckRobustness, "send: %v", err)
	}
	if b, err := r.recv(c, r.opts.QueryTimeout); err != nil {
		return fail(CheckRobustness, "query before handshake: %v", err)
	} else if v, _ := decodeReply(b); v.Type != cgp.TypeError && v.Type != cgp.TypeFrames {
		return fail(CheckRobustness, "query before handshake answered %.200s", b)
	}
	if _, _, err := r.handshake(c, r.opts.HostVersion); err != nil {
		return fail(CheckRobustness, "handshake after early query: %v", err)
	}
	long := append([]byte(`{"type":"query","pad":"`), make([]byte, 2<<20)...)
	for i := 23; i < len(long); i++ {
		long[i] = 'a'
	}
	bad := [][]byte{[]byte("{\"type\":\"query\",\"query\":\"\xff\xfe\"}"), long}
	if r.t.Stdio() {
		bad = append([][]byte{{}, []byte("   \r")}, bad...)
	}
	for _, l := range bad {
		if err := c.Send(l); err != nil {
			return fail(CheckRobustness, "send: %v", err)
		}
	}
	if err := c.Send([]byte(`{"type":"query","query":` + SampleQuery + `}`)); err != nil {
		return fail(CheckRobustness, "send: %v", err)
	}
	for i := 0; i < 8; i++ {
		b, err := r.recv(c, r.opts.QueryTimeout)
		if err != nil {
			return fail(CheckRobustness, "no frames after bad lines (provider died?): %v", err)
		}
		v, _ := decodeReply(b)
		if v.Type == cgp.TypeFrames {
			return pass(CheckRobustness, "survived blank, invalid UTF-8 and a 2 MiB line; %d error replies first", i)
		}
		if v.Type != cgp.TypeError || v.Code == nil || *v.Code != cgp.CodeBadRequest {
			return fail(CheckRobustness, "bad line answered %.200s, want bad_request or silence", b)
		}
	}
	return fail(CheckRobustness, "too many replies before the query's frames")
}

func (r *runner) checkEOF() Check {
	if !r.t.Stdio() {
		return skip(CheckEOFClean, "stdio only")
	}
	c, err := r.openHandshaken()
	if err != nil {
		return fail(CheckEOFClean, "fresh provider: %v", err)
	}
	info := c.Close(r.opts.ShutdownGrace)
	if !info.Exited || info.Code != 0 {
		return fail(CheckEOFClean, "on stdin EOF: exited=%v code=%d after %v (R2)", info.Exited, info.Code, info.Duration)
	}
	return pass(CheckEOFClean, "exit 0 in %v", info.Duration.Round(time.Millisecond))
}

func (r *runner) checkShutdown(c Conn) Check {
	if err := c.Send([]byte(`{"type":"shutdown"}`)); err != nil {
		return fail(CheckShutdownClean, "send: %v", err)
	}
	if sc, ok := c.(*stdioConn); ok {
		info, exited := sc.waitExit(r.opts.ShutdownGrace)
		c.Close(0)
		if !exited {
			return fail(CheckShutdownClean, "still running %v after shutdown (R2)", r.opts.ShutdownGrace)
		}
		if info.Code != 0 {
			return fail(CheckShutdownClean, "exit code %d after shutdown", info.Code)
		}
		return pass(CheckShutdownClean, "exit 0")
	}
	st := c.LastStatus()
	if st < 200 || st > 299 {
		return fail(CheckShutdownClean, "HTTP shutdown answered %d", st)
	}
	if _, _, err := r.handshake(c, r.opts.HostVersion); err != nil {
		return fail(CheckShutdownClean, "HTTP provider stopped serving after shutdown: %v", err)
	}
	return pass(CheckShutdownClean, "HTTP %d and still serving", st)
}
