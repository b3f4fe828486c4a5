package cgp_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/cmbnode/cmbnode/node/cgp"
)

const (
	testToken = "tok-0123456789abcdef0123456789abcdef"
	handshake = `{"type":"handshake","protocol_version":"contextgraph/1.0"}`
)

// httpReq is one request to the handler: a loopback Host and the test token
// unless a case changes them.
type httpReq struct {
	method  string
	host    string
	headers map[string]string
	noAuth  bool
}

func serveHTTP(t *testing.T, h http.Handler, rq httpReq) (*httptest.ResponseRecorder, map[string]any) {
	t.Helper()
	method := rq.method
	if method == "" {
		method = http.MethodPost
	}
	r := httptest.NewRequest(method, "/contextgraph", strings.NewReader(handshake))
	r.Host = rq.host
	if !rq.noAuth {
		r.Header.Set("Authorization", "Bearer "+testToken)
	}
	for k, v := range rq.headers {
		r.Header.Set(k, v)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	var m map[string]any
	_ = json.Unmarshal(w.Body.Bytes(), &m)
	for k := range w.Header() {
		if strings.HasPrefix(strings.ToLower(k), "access-control-") {
			t.Errorf("%s %s: response grants CORS header %s", method, rq.host, k)
		}
	}
	return w, m
}

func tokenHandler(t *testing.T) http.Handler {
	t.Helper()
	return cgp.NewHTTPHandler(mustEngine(t, smallStore()), cgp.HTTPOptions{BearerToken: testToken})
}

// TestCGPHTTPRequiresToken: every request needs the bearer token, compared
// whole; a handler built without one refuses everything rather than serving
// memory to anyone who can reach the port.
func TestCGPHTTPRequiresToken(t *testing.T) {
	open := cgp.NewHTTPHandler(mustEngine(t, smallStore()), cgp.HTTPOptions{})
	for _, auth := range []string{"", "Bearer ", "Bearer x"} {
		w, m := serveHTTP(t, open, httpReq{host: "127.0.0.1:7474", noAuth: true, headers: map[string]string{"Authorization": auth}})
		if w.Code != http.StatusUnauthorized || m["code"] != "unauthorized" {
			t.Errorf("no configured token, Authorization %q: %d %v", auth, w.Code, m)
		}
	}

	h := tokenHandler(t)
	for name, auth := range map[string]string{
		"missing":         "",
		"wrong":           "Bearer tok-0123456789abcdef0123456789abcdeX",
		"prefix":          "Bearer " + testToken[:len(testToken)-1],
		"longer":          "Bearer " + testToken + "0",
		"other scheme":    "Basic " + testToken,
		"no scheme":       testToken,
		"token twice":     "Bearer " + testToken + " " + testToken,
		"empty bearer":    "Bearer",
		"in the password": "Basic dXNlcjp0b2stMDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=",
	} {
		w, m := serveHTTP(t, h, httpReq{host: "localhost:7474", noAuth: true, headers: map[string]string{"Authorization": auth}})
		if w.Code != http.StatusUnauthorized || w.Header().Get("WWW-Authenticate") != "Bearer" ||
			m["type"] != "error" || m["code"] != "unauthorized" || w.Header().Get("Content-Type") != "application/json" {
			t.Errorf("%s token: %d %v %v", name, w.Code, w.Header(), m)
		}
		if strings.Contains(w.Body.String(), testToken) {
			t.Errorf("%s token: the reply quotes the token: %s", name, w.Body)
		}
	}
	for _, auth := range []string{"Bearer " + testToken, "bearer " + testToken, "BEARER  " + testToken} {
		w, m := serveHTTP(t, h, httpReq{host: "localhost:7474", noAuth: true, headers: map[string]string{"Authorization": auth}})
		if w.Code != http.StatusOK || m["type"] != "handshake_ack" {
			t.Errorf("Authorization %q: %d %v", auth, w.Code, m)
		}
	}
}

// TestCGPHTTPRefusesForeignHost: a page whose name the attacker re-points at
// 127.0.0.1 (DNS rebinding) reaches the port with its own name in Host, so
// only loopback names and addresses are answered, even with the token.
func TestCGPHTTPRefusesForeignHost(t *testing.T) {
	h := tokenHandler(t)
	for _, host := range []string{
		"", "example.com", "evil.example:7474", "127.0.0.1.nip.io:7474", "localhost.evil.example",
		"evillocalhost", "0.0.0.0:7474", "192.168.1.10:7474", "[::]:7474", "[fe80::1]:7474",
		"[::ffff:127.0.0.1]:7474", "127.0.0.1:7474:1", "[::1", "::1",
	} {
		w, m := serveHTTP(t, h, httpReq{host: host})
		if w.Code != http.StatusMisdirectedRequest || m["type"] != "error" || m["code"] != "forbidden" ||
			!strings.Contains(w.Body.String(), "loopback") {
			t.Errorf("Host %q: %d %s", host, w.Code, w.Body)
		}
	}
	for _, host := range []string{
		"localhost", "localhost:7474", "LocalHost:7474", "localhost.:7474", "app.localhost:7474",
		"127.0.0.1", "127.0.0.1:7474", "127.1.2.3:80", "[::1]", "[::1]:7474",
	} {
		w, m := serveHTTP(t, h, httpReq{host: host})
		if w.Code != http.StatusOK || m["type"] != "handshake_ack" {
			t.Errorf("Host %q: %d %s", host, w.Code, w.Body)
		}
	}
}

// TestCGPHTTPRefusesCrossOrigin: browsers let any page POST to loopback and
// mark it with Origin or Sec-Fetch-Site; such requests are refused outright
// (no CORS grant, no preflight), so a page can neither read nor trigger a
// query. Only the server's own origin, which serves no pages, passes.
func TestCGPHTTPRefusesCrossOrigin(t *testing.T) {
	h := tokenHandler(t)
	for name, rq := range map[string]httpReq{
		"foreign origin":  {headers: map[string]string{"Origin": "https://evil.example"}},
		"opaque origin":   {headers: map[string]string{"Origin": "null"}},
		"other port":      {headers: map[string]string{"Origin": "http://127.0.0.1:3000"}},
		"other name":      {headers: map[string]string{"Origin": "http://localhost:7474"}},
		"https origin":    {headers: map[string]string{"Origin": "https://127.0.0.1:7474"}},
		"cross-site":      {headers: map[string]string{"Sec-Fetch-Site": "cross-site"}},
		"same-site":       {headers: map[string]string{"Sec-Fetch-Site": "same-site"}},
		"own origin, but": {headers: map[string]string{"Origin": "http://127.0.0.1:7474", "Sec-Fetch-Site": "cross-site"}},
		"preflight": {method: http.MethodOptions, noAuth: true, headers: map[string]string{
			"Origin": "https://evil.example", "Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "authorization"}},
		"untokened": {noAuth: true, headers: map[string]string{"Origin": "https://evil.example"}},
	} {
		rq.host = "127.0.0.1:7474"
		w, m := serveHTTP(t, h, rq)
		if w.Code != http.StatusForbidden || m["type"] != "error" || m["code"] != "forbidden" ||
			!strings.Contains(w.Body.String(), "cross-origin") {
			t.Errorf("%s: %d %s", name, w.Code, w.Body)
		}
	}
	// A preflight without an Origin is just a method other than POST.
	if w, _ := serveHTTP(t, h, httpReq{method: http.MethodOptions, host: "127.0.0.1:7474"}); w.Code != http.StatusMethodNotAllowed {
		t.Errorf("OPTIONS without Origin: %d", w.Code)
	}
	for name, hd := range map[string]map[string]string{
		"own origin":  {"Origin": "http://127.0.0.1:7474", "Sec-Fetch-Site": "same-origin"},
		"typed in":    {"Sec-Fetch-Site": "none"},
		"not browser": nil,
	} {
		w, m := serveHTTP(t, h, httpReq{host: "127.0.0.1:7474", headers: hd})
		if w.Code != http.StatusOK || m["type"] != "handshake_ack" {
			t.Errorf("%s: %d %s", name, w.Code, w.Body)
		}
	}
}
