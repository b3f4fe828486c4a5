package cgptest

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"

	"github.com/cmbnode/cmbnode/node/cgp"
)

// Provider process defaults: the corpus every spawned provider serves.
const (
	CorpusSize = 240
	CorpusSeed = 1
)

// ModeHonest serves the real engine through the real cgp.Serve.
const ModeHonest = "honest"

// RedTeamModes maps each misbehaviour of the fake provider (spec §9.2,
// mirroring the reference fixture's --misbehave list) to the check that
// must turn red against it.
func RedTeamModes() map[string]string {
	return map[string]string{
		"lying-costs":          CheckBudgetHonesty,
		"under-report-cost":    CheckBudgetHonesty,
		"bad-score":            CheckFrameValidity,
		"empty-citation":       CheckFrameValidity,
		"bad-version":          CheckHandshake,
		"crash-on-query":       CheckFrameValidity,
		"crash-on-garbage":     CheckMalformedInput,
		"mislabel-malformed":   CheckMalformedInput,
		"bad-timestamp":        CheckFrameValidity,
		"malformed-digest":     CheckFrameValidity,
		"flood-frames":         CheckBudgetHonesty,
		"drop-correlation-id":  CheckCorrelation,
		"lying-representation": CheckFrameValidity,
		"ignore-as-of":         CheckAsOfTemporal,
		"ignore-valid-to":      CheckAsOfTemporal,
		"accept-bad-embedding": CheckEmbeddingFP,
		"rubber-stamp-verify":  CheckVerifyHonesty,
		"hollow-verify":        CheckVerifyHonesty,
		"scope-lie":            CheckConsentScope,
		"ignore-kinds":         CheckKindsFilter,
		"ignore-anchors":       CheckAnchorRelevance,
		"lift-signature":       CheckAttestation,
		"forge-signature":      CheckAttestation,
		"truncate-chain":       CheckAttestation,
	}
}

// errCrash is how a crashing mode ends the fake: the process exits non-zero
// mid-session, exactly what a crash looks like to a host.
var errCrash = errors.New("fake provider crashes on purpose")

// RunProvider is the main of a spawned provider: args[0] is a mode
// (ModeHonest or a red-team mode). It returns the exit code.
func RunProvider(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	if len(args) < 1 {
		fmt.Fprintln(stderr, "usage: provider MODE")
		return 2
	}
	e, _, err := NewEngine(CorpusSize, CorpusSeed)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	mode := args[0]
	if mode == ModeHonest {
		err = cgp.Serve(ctx, stdin, stdout, e, cgp.ServeOptions{Logger: log})
	} else if _, ok := RedTeamModes()[mode]; ok {
		err = serveFake(ctx, mode, e, stdin, stdout, log)
	} else {
		fmt.Fprintf(stderr, "unknown mode %q\n", mode)
		return 2
	}
	if err != nil {
		fmt.Fprintln(stderr, "provider:", err)
		return 3
	}
	return 0
}

// serveFake is a lock-step loop around the honest Session, misbehaving in
// exactly one way per mode.
func serveFake(ctx context.Context, mode string, e *cgp.Engine, r io.Reader, w io.Writer, log *slog.Logger) error {
	sess := cgp.NewSession(&fakeHandler{e: e, mode: mode}, log)
	br := bufio.NewReaderSize(r, 1<<20)
	for {
		line, rerr := br.ReadBytes('\n')
		line = []byte(strings.TrimRight(string(line), "\r\n"))
		if len(strings.TrimSpace(string(line))) > 0 {
			var probe map[string]json.RawMessage
			isJSON := json.Unmarshal(line, &probe) == nil
			switch {
			case mode == "crash-on-garbage" && !isJSON:
				return errCrash
			case mode == "mislabel-malformed" && !isJSON:
				if _, err := w.Write([]byte(`{"type":"error","code":"internal","message":"oops"}` + "\n")); err != nil {
					return err
				}
				continue
			case mode == "crash-on-query" && string(probe["type"]) == `"query"`:
				return errCrash
			}
			reply, out := sess.HandleLine(ctx, line)
			if out == cgp.Stop {
				return nil
			}
			if reply != nil {
				reply = mutateReply(mode, reply)
				if _, err := w.Write(append(reply, '\n')); err != nil {
					return err
				}
			}
		}
		if rerr != nil {
			if errors.Is(rerr, io.EOF) {
				return nil
			}
			return rerr
		}
	}
}

// mutateReply applies the representational lies to an encoded reply.
func mutateReply(mode string, reply []byte) []byte {
	var env map[string]any
	if json.Unmarshal(reply, &env) != nil {
		return reply
	}
	if mode == "drop-correlation-id" {
		delete(env, "id")
	}
	res, _ := env["result"].(map[string]any)
	frames, _ := res["frames"].([]any)
	atts, _ := res["frame_attestations"].([]any)
	for i, fi := range frames {
		f, _ := fi.(map[string]any)
		cost, _ := f["token_cost"].(float64)
		switch mode {
		case "lying-costs":
			f["token_cost"] = cost + 7
		case "under-report-cost":
			f["token_cost"] = float64(int(cost) / 2)
		case "bad-score":
			f["score"] = 1.5
		case "empty-citation":
			f["citation_label"] = " \t "
		case "bad-timestamp":
			f["valid_from"] = "2026-07-01 00:00:00+02:00"
		case "malformed-digest":
			if d, ok := f["content_digest"].(string); ok {
				f["content_digest"] = strings.ToUpper(d)
			}
		case "lying-representation":
			f["canonical_content_hash"] = f["content_digest"]
			f["content_ref"] = map[string]any{"provider_id": "cmbnode", "uri": "contextgraph-ref://cmbnode/x"}
		case "truncate-chain":
			if p, ok := f["provenance"].([]any); ok && len(p) > 0 && i == 0 {
				f["provenance"] = p[:len(p)-1]
			}
		}
	}
	switch mode {
	case "lift-signature":
		// Move one frame's signature onto another frame's entry.
		if len(atts) >= 2 {
			a0, _ := atts[0].(map[string]any)
			a1, _ := atts[1].(map[string]any)
			a0["attestation"], a1["attestation"] = a1["attestation"], a0["attestation"]
		}
	case "forge-signature":
		for _, ai := range atts {
			a, _ := ai.(map[string]any)
			if s, ok := a["attestation"].(map[string]any); ok {
				sig, _ := s["signature"].(string)
				if sig != "" {
					flip := "0"
					if sig[0] == '0' {
						flip = "1"
					}
					s["signature"] = flip + sig[1:]
				}
			}
		}
	}
	out, err := json.Marshal(env)
	if err != nil {
		return reply
	}
	return out
}

// fakeHandler wraps the honest engine with the behavioural lies.
type fakeHandler struct {
	e    *cgp.Engine
	mode string
}

func (h *fakeHandler) Ack() cgp.HandshakeAck {
	ack := h.e.Ack()
	switch h.mode {
	case "bad-version":
		ack.ProtocolVersion = "contextgraph/2.0"
	case "scope-lie":
		ack.Provider.DataFlow = cgp.DataFlow{Reads: true, Egress: false, EgressScopes: []string{"third-party-model"}}
	case "accept-bad-embedding":
		fp := "fake-embed/3"
		ack.Capabilities.EmbeddingsFingerprint = &fp
	}
	return ack
}

func (h *fakeHandler) Query(ctx context.Context, q *cgp.ContextQuery) (*cgp.ContextQueryResult, error) {
	qq := *q
	switch h.mode {
	case "ignore-as-of":
		qq.AsOf = nil
	case "accept-bad-embedding":
		qq.Embedding = nil
	case "ignore-kinds":
		qq.Kinds = nil
	case "flood-frames":
		qq.MaxFrames += 5
		qq.MaxTokens = 1 << 30
	case "ignore-anchors":
		if len(q.Anchors) > 0 {
			qq.Anchors = nil
			res, err := h.e.Query(ctx, &qq)
			if err != nil {
				return nil, err
			}
			res.Frames = slices.DeleteFunc(res.Frames, func(f cgp.Frame) bool { return isAnchored(f, q.Anchors) })
			res.FrameAttestations, res.ResultAttestation = nil, nil
			return res, nil
		}
	case "ignore-valid-to":
		if q.AsOf != nil {
			return h.ignoreValidTo(ctx, q)
		}
	}
	return h.e.Query(ctx, &qq)
}

// ignoreValidTo honours valid_from but not valid_to, and puts the frames
// that only the valid_to bound excludes first.
func (h *fakeHandler) ignoreValidTo(ctx context.Context, q *cgp.ContextQuery) (*cgp.ContextQueryResult, error) {
	pin, _ := cgp.ParseTime(*q.AsOf)
	qq := *q
	qq.AsOf, qq.MaxFrames, qq.MaxTokens = nil, 1000, 1<<30
	all, err := h.e.Query(ctx, &qq)
	if err != nil {
		return nil, err
	}
	var kept []cgp.Frame
	for _, f := range all.Frames {
		if vf, err := cgp.ParseTime(f.ValidFrom); err == nil && !vf.After(pin) {
			kept = append(kept, f)
		}
	}
	slices.SortStableFunc(kept, func(a, b cgp.Frame) int {
		ea, eb := a.ValidTo != "", b.ValidTo != ""
		switch {
		case ea && !eb:
			return -1
		case eb && !ea:
			return 1
		}
		return 0
	})
	res := &cgp.ContextQueryResult{Frames: []cgp.Frame{}}
	var used uint64
	for _, f := range kept {
		if len(res.Frames) < int(q.MaxFrames) && used+uint64(f.TokenCost) <= uint64(q.MaxTokens) {
			res.Frames = append(res.Frames, f)
			used += uint64(f.TokenCost)
		}
	}
	res.Truncated = len(res.Frames) < len(kept)
	return res, nil
}

func isAnchored(f cgp.Frame, anchors []string) bool {
	for _, a := range anchors {
		if f.URI == a {
			return true
		}
		for _, r := range f.Relations {
			if r.TargetURI == a {
				return true
			}
		}
	}
	return false
}

func (h *fakeHandler) Verify(ctx context.Context, req *cgp.VerifyRequest) (*cgp.VerifyResponse, error) {
	switch h.mode {
	case "rubber-stamp-verify":
		out := &cgp.VerifyResponse{Verdicts: []cgp.Verdict{}}
		for _, id := range req.Frames {
			out.Verdicts = append(out.Verdicts, cgp.Verdict{Frame: id, Status: cgp.StatusValid})
		}
		return out, nil
	case "hollow-verify":
		return &cgp.VerifyResponse{Verdicts: []cgp.Verdict{}}, nil
	}
	return h.e.Verify(ctx, req)
}
