package embed

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/cmbnode/cmbnode/internal/opt"
)

// HTTPOptions configure an OpenAI-compatible embeddings endpoint.
type HTTPOptions struct {
	// URL is the API base, e.g. http://127.0.0.1:11434/v1 for a local
	// Ollama; requests go to URL + "/embeddings".
	URL string
	// Model is sent as "model"; Dim is the length every vector must have.
	Model string
	Dim   int
	// KernelID names the vector space (default: the model, folded to a
	// token, with "-d<Dim>"). Change it when the model's weights change
	// under the same name, so old and new vectors are never compared.
	KernelID string
	// Timeout bounds one request (default 10 s); BatchSize the texts per
	// request (default 32); Retries the further attempts after a transient
	// failure (network, 429, 5xx; default 2), spaced by Backoff doubling
	// (default 200 ms).
	Timeout   time.Duration
	BatchSize int
	Retries   int
	Backoff   time.Duration
	// Client, if set, replaces the default client (whose timeout is
	// Timeout). Tests use it; the daemon does not.
	Client *http.Client
}

// HTTP is an Encoder over an OpenAI-compatible /v1/embeddings endpoint.
// Vectors are L2-normalised on arrival, so the fingerprint says l2 whatever
// the server returns.
type HTTP struct {
	o      HTTPOptions
	k      Kernel
	client *http.Client
	maxLen int64
}

// NewHTTP checks o and returns the encoder. It does not contact the server.
func NewHTTP(o HTTPOptions) (*HTTP, error) {
	u, err := url.Parse(o.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("embeddings url %q must be an http(s) URL", o.URL)
	}
	if strings.TrimSpace(o.Model) == "" {
		return nil, errors.New("embeddings model must be set")
	}
	opt.Default(&o.Timeout, 10*time.Second)
	opt.Default(&o.BatchSize, 32)
	opt.Default(&o.Backoff, 200*time.Millisecond)
	if o.Retries < 0 {
		o.Retries = 0
	} else if o.Retries == 0 {
		o.Retries = 2
	}
	model := strings.NewReplacer("/", "-", " ", "-").Replace(strings.TrimSpace(o.Model))
	o.KernelID = cmp.Or(o.KernelID, tokenOf(model)+"-d"+strconv.Itoa(o.Dim))
	k := Kernel{ID: o.KernelID, Fingerprint: model + "/" + strconv.Itoa(o.Dim) + "/l2", Dim: o.Dim}
	if err := CheckKernel(k); err != nil {
		return nil, err
	}
	h := &HTTP{o: o, k: k, client: cmp.Or(o.Client, &http.Client{Timeout: o.Timeout})}
	// A number prints in at most ~24 bytes of JSON; allow that for every
	// vector of a batch plus room for the envelope, and not a byte more.
	h.maxLen = int64(o.BatchSize)*int64(o.Dim)*24 + 64<<10
	return h, nil
}

func tokenOf(s string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(s) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '.', r == '_', r == '-':
			b.WriteRune(r)
		default:
			b.WriteByte('-')
		}
	}
	t := strings.Trim(b.String(), "-._")
	if len(t) > 48 {
		t = t[:48]
	}
	return cmp.Or(t, "model")
}

// Kernel is the endpoint's kernel.
func (h *HTTP) Kernel() Kernel { return h.k }

// Encode sends texts in batches of BatchSize, retrying transient failures.
func (h *HTTP) Encode(ctx context.Context, texts []string) ([][]float32, error) {
	out := make([][]float32, 0, len(texts))
	for i := 0; i < len(texts); i += h.o.BatchSize {
		batch := texts[i:min(i+h.o.BatchSize, len(texts))]
		vs, err := h.encodeRetrying(ctx, batch)
		if err != nil {
			return nil, err
		}
		out = append(out, vs...)
	}
	return out, nil
}

func (h *HTTP) encodeRetrying(ctx context.Context, batch []string) ([][]float32, error) {
	wait := h.o.Backoff
	for attempt := 0; ; attempt++ {
		vs, err := h.encodeOnce(ctx, batch)
		var te transientError
		if err == nil || !errors.As(err, &te) || attempt == h.o.Retries {
			return vs, err
		}
		select {
		case <-time.After(wait):
			wait *= 2
		case <-ctx.Done():
			return nil, fmt.Errorf("%w: %w (after %v)", ErrEncoder, ctx.Err(), err)
		}
	}
}

// transientError marks a failure worth retrying.
type transientError struct{ error }

func (e transientError) Unwrap() error { return e.error }

type embedRequest struct {
	Model string   `json:"model"`
	Input []string `json:"input"`
}

type embedResponse struct {
	Data []struct {
		Index     int       `json:"index"`
		Embedding []float32 `json:"embedding"`
	} `json:"data"`
}

func (h *HTTP) encodeOnce(ctx context.Context, batch []string) ([][]float32, error) {
	body, err := json.Marshal(embedRequest{Model: h.o.Model, Input: batch})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, h.o.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimRight(h.o.URL, "/")+"/embeddings", bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrEncoder, err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := h.client.Do(req)
	if err != nil {
		return nil, transientError{fmt.Errorf("%w: %v", ErrEncoder, err)}
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, h.maxLen+1))
	if err != nil {
		return nil, transientError{fmt.Errorf("%w: reading the response: %v", ErrEncoder, err)}
	}
	if int64(len(raw)) > h.maxLen {
		return nil, fmt.Errorf("%w: response is over %d bytes", ErrEncoder, h.maxLen)
	}
	if resp.StatusCode != http.StatusOK {
		err := fmt.Errorf("%w: %s answered %s", ErrEncoder, req.URL.Redacted(), resp.Status)
		if resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500 {
			return nil, transientError{err}
		}
		return nil, err
	}
	var er embedResponse
	if err := json.Unmarshal(raw, &er); err != nil {
		return nil, fmt.Errorf("%w: response does not decode: %v", ErrEncoder, err)
	}
	if len(er.Data) != len(batch) {
		return nil, fmt.Errorf("%w: %d vectors for %d texts", ErrEncoder, len(er.Data), len(batch))
	}
	out := make([][]float32, len(batch))
	for _, d := range er.Data {
		if d.Index < 0 || d.Index >= len(batch) || out[d.Index] != nil {
			return nil, fmt.Errorf("%w: response index %d is out of place", ErrEncoder, d.Index)
		}
		if len(d.Embedding) != h.k.Dim {
			return nil, fmt.Errorf("%w: a vector of %d dimensions, the kernel declares %d", ErrEncoder, len(d.Embedding), h.k.Dim)
		}
		if !Normalize(d.Embedding) {
			return nil, fmt.Errorf("%w: a vector holds NaN or infinity", ErrEncoder)
		}
		out[d.Index] = d.Embedding
	}
	return out, nil
}
