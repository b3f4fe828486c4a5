package cgptest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/cmbnode/cmbnode/internal/opt"
	"github.com/cmbnode/cmbnode/node/cgp"
)

// Check statuses, as the reference report spells them.
const (
	Pass = "pass"
	Fail = "fail"
	Skip = "skipped"
)

// Check is one line of a report.
type Check struct {
	Name     string `json:"name"`
	Status   string `json:"status"`
	Evidence string `json:"evidence"`
}

// Report is a harness run, shaped like contextgraph-inspect --json.
type Report struct {
	Target string  `json:"target"`
	Checks []Check `json:"checks"`
}

// Get returns the named check (zero Check if it did not run).
func (r Report) Get(name string) Check {
	for _, c := range r.Checks {
		if c.Name == name {
			return c
		}
	}
	return Check{}
}

// Failed lists the failing checks; a run passes iff it is empty.
func (r Report) Failed() []Check {
	var out []Check
	for _, c := range r.Checks {
		if c.Status == Fail {
			out = append(out, c)
		}
	}
	return out
}

func (r Report) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "target %s\n", r.Target)
	for _, c := range r.Checks {
		fmt.Fprintf(&b, "  %-34s %-7s %s\n", c.Name, c.Status, c.Evidence)
	}
	return b.String()
}

// Check names. The first fourteen are the reference suite's (spec §9.1);
// the rest are the project's stricter ones (spec §9.2).
const (
	CheckHandshake          = "handshake"
	CheckConsentScope       = "consent-scope"
	CheckFrameValidity      = "frame-validity"
	CheckVerifyHonesty      = "verify-honesty"
	CheckBudgetHonesty      = "budget-honesty"
	CheckAsOfTemporal       = "as-of-temporal"
	CheckKindsFilter        = "kinds-filter"
	CheckAnchorRelevance    = "anchor-relevance"
	CheckProvenanceFixture  = "provenance-fixture-consistency"
	CheckShutdownClean      = "shutdown-clean"
	CheckMalformedInput     = "malformed-input-tolerance"
	CheckEmbeddingFP        = "embedding-fingerprint"
	CheckCorrelation        = "correlation"
	CheckAttestation        = "attestation"
	CheckTightBudget        = "tight-budget"
	CheckUnknownMembers     = "unknown-members"
	CheckUnknownTypes       = "unknown-types"
	CheckVersionMismatch    = "version-mismatch"
	CheckEmbeddingUndecl    = "embedding-undeclared"
	CheckRobustness         = "line-robustness"
	CheckEOFClean           = "eof-clean"
	CheckSchemaLint         = "schema-lint"
	CheckVerifyUnknownFrame = "verify-unknown-frame"
)

// AllChecks returns every check name in the order a full run reports them.
func AllChecks() []string {
	return []string{
		CheckHandshake, CheckConsentScope, CheckFrameValidity, CheckVerifyHonesty, CheckBudgetHonesty,
		CheckAsOfTemporal, CheckKindsFilter, CheckAnchorRelevance, CheckProvenanceFixture, CheckAttestation,
		CheckTightBudget, CheckUnknownMembers, CheckUnknownTypes, CheckVerifyUnknownFrame,
		CheckMalformedInput, CheckEmbeddingFP, CheckEmbeddingUndecl, CheckCorrelation, CheckVersionMismatch,
		CheckRobustness, CheckEOFClean, CheckShutdownClean, CheckSchemaLint,
	}
}

// SampleQuery is the conformance suite's sample query.
const SampleQuery = `{"goal":"conformance probe: return your most relevant frames","query_text":"conformance probe","max_frames":8,"max_tokens":4096}`

// Options tunes a run; each field left zero takes its value in
// DefaultOptions.
type Options struct {
	// HostVersion is sent in the handshake (default contextgraph/1.0-draft,
	// what the mirror's host sends).
	HostVersion string
	// SchemaPath is the envelope schema every received envelope is linted
	// against; empty reports schema-lint as skipped.
	SchemaPath string
	// Only restricts the reported checks (the handshake and the sample
	// query always run, as everything else depends on them).
	Only             []string
	HandshakeTimeout time.Duration // default 10 s
	QueryTimeout     time.Duration // default 30 s
	ShutdownGrace    time.Duration // default 2 s
}

type runner struct {
	ctx    context.Context
	t      Target
	opts   Options
	schema *jsonschema.Schema

	mu        sync.Mutex
	lintFails []string
	linted    int

	ack    *ackView
	sample *resultView
}

// DefaultOptions returns the settings Run uses for the fields left zero.
func DefaultOptions() Options {
	return Options{
		HostVersion:      "contextgraph/1.0-draft",
		HandshakeTimeout: 10 * time.Second,
		QueryTimeout:     30 * time.Second,
		ShutdownGrace:    2 * time.Second,
	}
}

// Run runs the harness against t.
func Run(ctx context.Context, t Target, opts Options) Report {
	def := DefaultOptions()
	opt.Default(&opts.HostVersion, def.HostVersion)
	opt.Default(&opts.HandshakeTimeout, def.HandshakeTimeout)
	opt.Default(&opts.QueryTimeout, def.QueryTimeout)
	opt.Default(&opts.ShutdownGrace, def.ShutdownGrace)
	r := &runner{ctx: ctx, t: t, opts: opts}
	rep := Report{Target: t.Name()}
	var schemaErr error
	if opts.SchemaPath != "" {
		r.schema, schemaErr = compileSchema(opts.SchemaPath)
	}
	want := func(name string) bool { return len(opts.Only) == 0 || slices.Contains(opts.Only, name) }
	add := func(c Check) {
		if want(c.Name) {
			rep.Checks = append(rep.Checks, c)
		}
	}

	main, err := t.Open(ctx)
	if err != nil {
		add(Check{CheckHandshake, Fail, "could not start provider: " + err.Error()})
		return rep
	}
	hs := r.checkHandshake(main)
	add(hs)
	if hs.Status != Pass {
		for _, n := range AllChecks()[1:] {
			add(Check{n, Skip, "handshake failed"})
		}
		main.Close(opts.ShutdownGrace)
		return rep
	}
	add(r.checkConsentScope())
	sample, sampleErr := r.query(main, SampleQuery, "")
	r.sample = sample
	mainChecks := []struct {
		name string
		f    func(Conn, error) Check
	}{
		{CheckFrameValidity, r.checkFrameValidity}, {CheckVerifyHonesty, r.checkVerifyHonesty},
		{CheckBudgetHonesty, r.checkBudgetHonesty}, {CheckAsOfTemporal, r.checkAsOf},
		{CheckKindsFilter, r.checkKinds}, {CheckAnchorRelevance, r.checkAnchors},
		{CheckProvenanceFixture, r.checkProvenanceFixture}, {CheckAttestation, r.checkAttestation},
		{CheckTightBudget, r.checkTightBudget}, {CheckUnknownMembers, r.checkUnknownMembers},
		{CheckUnknownTypes, r.checkUnknownTypes}, {CheckVerifyUnknownFrame, r.checkVerifyUnknown},
	}
	for _, mc := range mainChecks {
		if want(mc.name) {
			add(mc.f(main, sampleErr))
		}
	}
	fresh := []struct {
		name string
		f    func() Check
	}{
		{CheckMalformedInput, r.checkMalformed},
		{CheckEmbeddingFP, r.checkEmbeddingFP},
		{CheckEmbeddingUndecl, r.checkEmbeddingUndeclared},
		{CheckCorrelation, r.checkCorrelation},
		{CheckVersionMismatch, r.checkVersionMismatch},
		{CheckRobustness, r.checkRobustness},
		{CheckEOFClean, r.checkEOF},
	}
	for _, f := range fresh {
		if want(f.name) {
			add(f.f())
		}
	}
	add(r.checkShutdown(main))
	switch {
	case schemaErr != nil:
		add(Check{CheckSchemaLint, Fail, "schema does not compile: " + schemaErr.Error()})
	case r.schema == nil:
		add(Check{CheckSchemaLint, Skip, "no schema configured"})
	case len(r.lintFails) > 0:
		add(Check{CheckSchemaLint, Fail, fmt.Sprintf("%d of %d envelopes fail the schema; first: %s", len(r.lintFails), r.linted, r.lintFails[0])})
	default:
		add(Check{CheckSchemaLint, Pass, fmt.Sprintf("%d envelopes lint clean", r.linted)})
	}
	return rep
}

func compileSchema(path string) (*jsonschema.Schema, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	doc, err := jsonschema.UnmarshalJSON(f)
	if err != nil {
		return nil, err
	}
	c := jsonschema.NewCompiler()
	const loc = "file:///contextgraph-envelope.schema.json"
	if err := c.AddResource(loc, doc); err != nil {
		return nil, err
	}
	return c.Compile(loc)
}

// lint validates one received envelope against the authoring schema.
func (r *runner) lint(line []byte) {
	if r.schema == nil {
		return
	}
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(line))
	r.mu.Lock()
	defer r.mu.Unlock()
	r.linted++
	if err == nil {
		err = r.schema.Validate(inst)
	}
	if err != nil {
		r.lintFails = append(r.lintFails, fmt.Sprintf("%.200s: %.300s", line, err.Error()))
	}
}

// recv reads one reply and lints it.
func (r *runner) recv(c Conn, timeout time.Duration) ([]byte, error) {
	b, err := c.Recv(timeout)
	if err == nil {
		r.lint(b)
	}
	return b, err
}

// envelope views: decoded leniently (U1), with presence kept where the
// checks need it.

type ackView struct {
	Type            string `json:"type"`
	ProtocolVersion string `json:"protocol_version"`
	Provider        struct {
		Name     string `json:"name"`
		Version  string `json:"version"`
		DataFlow struct {
			Reads        bool     `json:"reads"`
			Writes       bool     `json:"writes"`
			Egress       bool     `json:"egress"`
			EgressScopes []string `json:"egress_scopes"`
		} `json:"data_flow"`
	} `json:"provider"`
	Capabilities struct {
		Query struct {
			Kinds []string `json:"kinds"`
		} `json:"query"`
		Correlation           bool    `json:"correlation"`
		Graph                 bool    `json:"graph"`
		Verify                bool    `json:"verify"`
		EmbeddingsFingerprint *string `json:"embeddings_fingerprint"`
	} `json:"capabilities"`
	AttesterKeys []cgp.AttesterKey `json:"attester_keys"`
}

type frameView struct {
	ID                   string          `json:"id"`
	Kind                 string          `json:"kind"`
	Title                *string         `json:"title"`
	Content              *string         `json:"content"`
	ContentDigest        *string         `json:"content_digest"`
	URI                  *string         `json:"uri"`
	Representation       *string         `json:"representation"`
	ContentRef           json.RawMessage `json:"content_ref"`
	Transform            json.RawMessage `json:"transform"`
	CanonicalContentHash *string         `json:"canonical_content_hash"`
	Score                *float64        `json:"score"`
	TokenCost            *float64        `json:"token_cost"`
	ValidFrom            *string         `json:"valid_from"`
	ValidTo              *string         `json:"valid_to"`
	RecordedAt           *string         `json:"recorded_at"`
	Provenance           []cgp.Link      `json:"provenance"`
	CitationLabel        *string         `json:"citation_label"`
	Relations            []struct {
		Rel         string  `json:"rel"`
		TargetURI   string  `json:"target_uri"`
		DisplayName *string `json:"display_name"`
	} `json:"relations"`
	decodeErr error
}

type resultView struct {
	ID                *string                `json:"-"`
	Frames            []frameView            `json:"-"`
	Truncated         *bool                  `json:"truncated"`
	DroppedEstimate   *float64               `json:"dropped_estimate"`
	FrameAttestations []cgp.FrameAttestation `json:"frame_attestations"`
	ResultAttestation *cgp.Attestation       `json:"result_attestation"`
}

type replyView struct {
	Type     string          `json:"type"`
	ID       *string         `json:"id"`
	Code     *string         `json:"code"`
	Message  string          `json:"message"`
	Result   json.RawMessage `json:"result"`
	Response json.RawMessage `json:"response"`
}

func decodeReply(b []byte) (replyView, error) {
	var v replyView
	err := json.Unmarshal(b, &v)
	return v, err
}

func decodeResult(raw json.RawMessage) (*resultView, error) {
	var res resultView
	if err := json.Unmarshal(raw, &res); err != nil {
		return nil, err
	}
	var frames struct {
		Frames *[]json.RawMessage `json:"frames"`
	}
	if err := json.Unmarshal(raw, &frames); err != nil {
		return nil, err
	}
	if frames.Frames == nil {
		return nil, fmt.Errorf("result.frames is missing or null")
	}
	if res.Truncated == nil {
		return nil, fmt.Errorf("result.truncated is missing")
	}
	for _, f := range *frames.Frames {
		var fv frameView
		fv.decodeErr = json.Unmarshal(f, &fv)
		res.Frames = append(res.Frames, fv)
	}
	return &res, nil
}

// query sends a query envelope (id optional) and returns the frames result,
// or an error naming what came back instead.
func (r *runner) query(c Conn, queryJSON, id string) (*resultView, error) {
	env := `{"type":"query","query":` + queryJSON
	if id != "" {
		env += `,"id":` + jsonString(id)
	}
	env += "}"
	if err := c.Send([]byte(env)); err != nil {
		return nil, fmt.Errorf("send query: %w", err)
	}
	b, err := r.recv(c, r.opts.QueryTimeout)
	if err != nil {
		return nil, fmt.Errorf("query reply: %w", err)
	}
	v, err := decodeReply(b)
	if err != nil {
		return nil, fmt.Errorf("reply is not JSON: %.200s", b)
	}
	if v.Type != cgp.TypeFrames {
		return nil, fmt.Errorf("reply is %q, not frames: %.300s", v.Type, b)
	}
	res, err := decodeResult(v.Result)
	if err != nil {
		return nil, fmt.Errorf("frames result: %w", err)
	}
	res.ID = v.ID
	return res, nil
}

func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

func queryWith(mods map[string]any) string {
	q := map[string]any{}
	_ = json.Unmarshal([]byte(SampleQuery), &q)
	for k, v := range mods {
		q[k] = v
	}
	b, _ := json.Marshal(q)
	return string(b)
}

func (r *runner) handshake(c Conn, version string) (*ackView, replyView, error) {
	if err := c.Send([]byte(`{"type":"handshake","protocol_version":` + jsonString(version) + `}`)); err != nil {
		return nil, replyView{}, fmt.Errorf("send handshake: %w", err)
	}
	b, err := r.recv(c, r.opts.HandshakeTimeout)
	if err != nil {
		return nil, replyView{}, fmt.Errorf("handshake reply: %w", err)
	}
	v, err := decodeReply(b)
	if err != nil {
		return nil, v, fmt.Errorf("handshake reply is not JSON: %.200s", b)
	}
	if v.Type != cgp.TypeHandshakeAck {
		return nil, v, fmt.Errorf("handshake reply is %q: %.300s", v.Type, b)
	}
	var ack ackView
	if err := json.Unmarshal(b, &ack); err != nil {
		return nil, v, fmt.Errorf("handshake_ack does not decode: %v", err)
	}
	return &ack, v, nil
}

// openHandshaken starts a fresh connection and completes the handshake.
func (r *runner) openHandshaken() (Conn, error) {
	c, err := r.t.Open(r.ctx)
	if err != nil {
		return nil, err
	}
	if _, _, err := r.handshake(c, r.opts.HostVersion); err != nil {
		c.Close(r.opts.ShutdownGrace)
		return nil, err
	}
	return c, nil
}
