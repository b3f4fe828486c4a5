// Package embedtest serves the OpenAI-compatible /v1/embeddings answer to
// tests that need a dense encoder: an in-test server whose vectors the test
// chooses.
package embedtest

import (
	"encoding/json"
	"io"
	"net/http"
)

// maxRequest bounds a request body read by Inputs.
const maxRequest = 1 << 20

// Inputs decodes an embeddings request's inputs, reading at most 1 MiB.
func Inputs(r *http.Request) ([]string, error) {
	var req struct{ Input []string }
	err := json.NewDecoder(io.LimitReader(r.Body, maxRequest)).Decode(&req)
	return req.Input, err
}

// Reply writes the answer for inputs: vector(input) for each, in order.
func Reply(w http.ResponseWriter, inputs []string, vector func(input string) []float32) {
	type datum struct {
		Index     int       `json:"index"`
		Embedding []float32 `json:"embedding"`
	}
	var out struct {
		Data []datum `json:"data"`
	}
	for i, in := range inputs {
		out.Data = append(out.Data, datum{Index: i, Embedding: vector(in)})
	}
	json.NewEncoder(w).Encode(out)
}

// Handler answers every request with vector(input) for each input, and a
// request it cannot decode with 400.
func Handler(vector func(input string) []float32) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		inputs, err := Inputs(r)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		Reply(w, inputs, vector)
	}
}
