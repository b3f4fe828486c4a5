package mesh

import (
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/cmbnode/cmbnode/cmb"
)

// cmbnode's vendor frames (MMP §7.3: x-<vendor>-<name>, ignored by nodes
// that do not speak them). They carry catch-up: bucket digests, key
// listings, and batched fetches. Every request has a reqId its answer echoes.
const (
	typeDigestReq = "x-cmbnode-digest-req" // {reqId, from, to, width}
	typeDigest    = "x-cmbnode-digest"     // {reqId, buckets:[{start,count,digest}], more}
	typeKeysReq   = "x-cmbnode-keys-req"   // {reqId, from, to, afterAt, afterKey, limit}
	typeKeys      = "x-cmbnode-keys"       // {reqId, keys:[{key,at}], more}
	typeFetchMany = "x-cmbnode-fetch-many" // {reqId, keys:[…]}
	typeRecords   = "x-cmbnode-records"    // {reqId, records:[{cmb,publicKey,e2ePublicKey}], missing:[…]}
)

type digestReq struct {
	ReqID string `json:"reqId"`
	From  int64  `json:"from"`
	To    int64  `json:"to"`
	Width int64  `json:"width"`
}

type bucketJSON struct {
	Start  int64  `json:"start"`
	Count  int    `json:"count"`
	Digest string `json:"digest"` // hex SHA-256
}

// digestResp lists the non-empty buckets of the window from its start, at
// most digestPage of them; More says later buckets hold records, which the
// requester asks for from the end of the last bucket listed. (A node that
// predates More ignores it, as it ignored buckets past its own cap.)
type digestResp struct {
	ReqID   string       `json:"reqId"`
	Buckets []bucketJSON `json:"buckets"`
	More    bool         `json:"more,omitempty"`
}

type keysReq struct {
	ReqID    string `json:"reqId"`
	From     int64  `json:"from"`
	To       int64  `json:"to"`
	AfterAt  int64  `json:"afterAt,omitempty"`
	AfterKey string `json:"afterKey,omitempty"`
	Limit    int    `json:"limit"`
}

type keyAt struct {
	Key string `json:"key"`
	At  int64  `json:"at"`
}

type keysResp struct {
	ReqID string  `json:"reqId"`
	Keys  []keyAt `json:"keys"`
	More  bool    `json:"more"`
}

type fetchMany struct {
	ReqID string   `json:"reqId"`
	Keys  []string `json:"keys"`
}

// fetchedRecord is one record of an x-cmbnode-records answer. In a public
// group it is {cmb, publicKey, e2ePublicKey}; in a private group it is
// {key, box}: box is a groupkey envelope (KindRecord, bound to key, sealed
// at the session's epoch) whose plaintext is the public form's JSON.
type fetchedRecord struct {
	CMB          json.RawMessage `json:"cmb,omitempty"`
	PublicKey    string          `json:"publicKey,omitempty"`
	E2EPublicKey string          `json:"e2ePublicKey,omitempty"`
	Key          string          `json:"key,omitempty"`
	Box          []byte          `json:"box,omitempty"`
}

type recordsResp struct {
	ReqID   string          `json:"reqId"`
	Records []fetchedRecord `json:"records"`
	Missing []string        `json:"missing,omitempty"`
}

// inFrame is a decoded frame off a stream: an MMP frame, or one of ours.
type inFrame struct {
	typ   string
	reqID string
	mmp   cmb.Frame
	body  any
}

// parseIn decodes one stream payload. Vendor frames are ours to decode;
// everything else goes through cmb.ParseFrame (ErrDiscard, *Unknown).
func parseIn(payload []byte) (inFrame, error) {
	var head struct {
		Type  string `json:"type"`
		ReqID string `json:"reqId"`
	}
	if len(payload) > 0 && payload[0] == '{' && json.Unmarshal(payload, &head) == nil {
		var body any
		switch head.Type {
		case typeDigestReq:
			body = &digestReq{}
		case typeDigest:
			body = &digestResp{}
		case typeKeysReq:
			body = &keysReq{}
		case typeKeys:
			body = &keysResp{}
		case typeFetchMany:
			body = &fetchMany{}
		case typeRecords:
			body = &recordsResp{}
		}
		if body != nil {
			if head.ReqID == "" {
				return inFrame{}, fmt.Errorf("%w: %s without reqId", cmb.ErrDiscard, head.Type)
			}
			if err := json.Unmarshal(payload, body); err != nil {
				return inFrame{}, fmt.Errorf("%w: %s: %v", cmb.ErrDiscard, head.Type, err)
			}
			return inFrame{typ: head.Type, reqID: head.ReqID, body: body}, nil
		}
	}
	f, err := cmb.ParseFrame(payload)
	if err != nil {
		return inFrame{}, err
	}
	in := inFrame{typ: f.FrameType(), mmp: f}
	if r, ok := f.(*cmb.FetchResult); ok {
		in.reqID = r.ReqID
	}
	return in, nil
}

// marshalVendor encodes one of our frames with its type first.
func marshalVendor(typ string, body any) ([]byte, error) {
	b, err := json.Marshal(body)
	if err != nil {
		return nil, fmt.Errorf("marshal %s: %w", typ, err)
	}
	out := make([]byte, 0, len(b)+len(typ)+12)
	out = append(out, `{"type":`...)
	out = strconv.AppendQuote(out, typ)
	if len(b) > 2 {
		out = append(out, ',')
		out = append(out, b[1:]...)
	} else {
		out = append(out, '}')
	}
	return out, nil
}
