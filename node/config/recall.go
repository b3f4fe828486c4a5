package config

import (
	"fmt"
	"math"
	"time"

	"github.com/cmbnode/cmbnode/node/embed"
	"github.com/cmbnode/cmbnode/node/svaf"
)

// Embeddings configure the optional dense encoder (docs/recall.md
// "Encoders"): an OpenAI-compatible /v1/embeddings endpoint. URL empty is
// off: recall is lexical and SVAF uses the built-in hashed kernel.
type Embeddings struct {
	URL        string `toml:"url"`
	Model      string `toml:"model"`
	Dimensions int    `toml:"dimensions"`
	// KernelID names the vector space (default derived from model and
	// dimensions); change it when the model changes under the same name.
	KernelID string   `toml:"kernel_id"`
	Timeout  Duration `toml:"timeout"`
	Batch    int      `toml:"batch"`
	// Floor is the cosine below which a record is no dense evidence.
	Floor float64 `toml:"floor"`
}

// SVAF configures admission of received broadcast records (MMP §9.2).
type SVAF struct {
	// Surface lists the verdicts whose records recall, CGP, MCP and recent
	// show: aligned, guarded, redundant, rejected.
	Surface        []string           `toml:"surface"`
	RecentAnchors  int                `toml:"recent_anchors"`
	NearestAnchors int                `toml:"nearest_anchors"`
	Redundant      float64            `toml:"redundant"`
	Aligned        float64            `toml:"aligned"`
	Guarded        float64            `toml:"guarded"`
	Lambda         float64            `toml:"temporal_lambda"`
	Freshness      Duration           `toml:"freshness"`
	FieldWeights   map[string]float64 `toml:"field_weights"`
}

// DefaultSVAF is MMP §10.2's uniform profile, hiding only redundant records.
func DefaultSVAF() SVAF {
	d := svaf.Default()
	return SVAF{Surface: []string{"aligned", "guarded", "rejected"}, RecentAnchors: 5, NearestAnchors: 5,
		Redundant: d.Redundant, Aligned: d.Aligned, Guarded: d.Guarded, Lambda: d.Lambda, Freshness: Duration{d.Freshness}}
}

// DefaultEmbeddings is off, with the settings used once a URL is set.
func DefaultEmbeddings() Embeddings {
	return Embeddings{Timeout: Duration{10 * time.Second}, Batch: 32, Floor: 0.5}
}

// Encoder builds the configured encoder; nil when none is.
func (e Embeddings) Encoder() (embed.Encoder, error) {
	if e.URL == "" {
		return nil, nil
	}
	return embed.NewHTTP(embed.HTTPOptions{URL: e.URL, Model: e.Model, Dim: e.Dimensions, KernelID: e.KernelID,
		Timeout: e.Timeout.Duration, BatchSize: e.Batch})
}

// Evaluator is the thresholds as the evaluator takes them.
func (s SVAF) Evaluator() svaf.Config {
	return svaf.Config{Redundant: s.Redundant, Aligned: s.Aligned, Guarded: s.Guarded, Lambda: s.Lambda,
		Freshness: s.Freshness.Duration, FieldWeights: s.FieldWeights}
}

// Decisions is Surface as verdicts.
func (s SVAF) Decisions() ([]svaf.Decision, error) {
	out := make([]svaf.Decision, 0, len(s.Surface))
	for _, x := range s.Surface {
		d, err := svaf.ParseDecision(x)
		if err != nil {
			return nil, err
		}
		out = append(out, d)
	}
	return out, nil
}

var fieldNames = map[string]bool{"focus": true, "issue": true, "intent": true, "motivation": true, "commitment": true, "perspective": true, "mood": true}

func (c *Config) validateRecall() error {
	if c.Embeddings.URL != "" {
		if _, err := c.Embeddings.Encoder(); err != nil {
			return fmt.Errorf("embeddings: %w", err)
		}
	}
	if f := c.Embeddings.Floor; math.IsNaN(f) || f < 0 || f >= 1 {
		return fmt.Errorf("embeddings.floor %v is not in [0,1)", f)
	}
	if _, err := c.SVAF.Decisions(); err != nil {
		return fmt.Errorf("svaf.surface: %w", err)
	}
	for f := range c.SVAF.FieldWeights {
		if !fieldNames[f] {
			return fmt.Errorf("svaf.field_weights: %q is not a field (focus, issue, intent, motivation, commitment, perspective, mood)", f)
		}
	}
	return c.SVAF.Evaluator().Validate()
}

func renderRecall(c Config) string {
	return fmt.Sprintf(`
# A dense encoder (off unless url is set): an OpenAI-compatible embeddings
# endpoint, e.g. a local Ollama at "http://127.0.0.1:11434/v1" with model
# "nomic-embed-text" and dimensions 768. Every record's fields get vectors,
# computed in the background (remember never waits for them); recall fuses
# them with the text index; SVAF judges with them; CGP declares their
# fingerprint and accepts query embeddings of that fingerprint. A record is
# dense evidence when its cosine with the query is above floor. Changing
# model or dimensions starts a new kernel: the store is encoded again and
# vectors of two kernels are never compared.
[embeddings]
url = %s
model = %s
dimensions = %d
# kernel_id = ""
timeout = %s
batch = %d
floor = %v

# SVAF admission of received broadcast records (MMP §9.2): each is judged
# against this node's anchors (its recent_anchors newest memories and its
# nearest_anchors best text matches; never rejected or redundant records) as
# aligned, guarded, redundant (a near-copy of an anchor) or rejected. Every
# record is kept with its verdict; surface lists the verdicts recall, CGP,
# MCP and recent show (records directed to this node are always shown).
# MMP's strict reading is ["aligned", "guarded"]. The thresholds and the
# freshness τ are MMP §10.2's uniform profile.
[svaf]
surface = %s
recent_anchors = %d
nearest_anchors = %d
redundant = %v
aligned = %v
guarded = %v
temporal_lambda = %v
freshness = %s
# field_weights = { focus = 2, issue = 1.5, intent = 1.5 }
`, quote(c.Embeddings.URL), quote(c.Embeddings.Model), c.Embeddings.Dimensions, quote(c.Embeddings.Timeout.String()), c.Embeddings.Batch, c.Embeddings.Floor,
		tomlList(c.SVAF.Surface), c.SVAF.RecentAnchors, c.SVAF.NearestAnchors, c.SVAF.Redundant, c.SVAF.Aligned, c.SVAF.Guarded, c.SVAF.Lambda, quote(c.SVAF.Freshness.String()))
}
