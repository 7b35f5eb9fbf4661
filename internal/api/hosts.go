package api

import (
	"errors"
	"fmt"
	"mime"
	"net"
	"net/http"
	"net/url"
	"strings"
)

// Browsers do not protect a server on loopback from the pages they show:
//
//   - DNS rebinding: a page at http://evil.example:8080 re-resolves its own
//     name to 127.0.0.1 and then talks to agentd as a same-origin page. Its
//     requests carry Host: evil.example:8080, so the Host allow-list
//     (hostPolicy) refuses them before anything else runs.
//   - CSRF: a page anywhere may POST a form (text/plain, urlencoded,
//     multipart) or a no-cors fetch without a preflight. State-changing
//     requests must carry application/json (which needs a preflight that
//     agentd never grants) and pass Go's cross-origin check (Fetch Metadata,
//     else Origin against Host).
//   - WebSocket handshakes ignore the same-origin policy: /api/ws, the PTY
//     and Socket.IO compare Origin with Host themselves.

// loopbackHosts are always allowed: only a page loaded from the machine
// itself has them as its origin.
var loopbackHosts = []string{"localhost", "127.0.0.1", "::1"}

// hostPolicy decides which Host headers the server answers. It is
// immutable after newHostPolicy.
type hostPolicy struct {
	any      bool            // "*": no check
	anyIP    bool            // any IP address literal
	names    map[string]bool // normalised names and addresses
	suffixes []string        // ".corp.example" from "*.corp.example"
}

func newHostPolicy(allowed []string, anyIP bool) (*hostPolicy, error) {
	p := &hostPolicy{anyIP: anyIP, names: map[string]bool{}}
	for _, h := range loopbackHosts {
		p.names[h] = true
	}
	for _, entry := range allowed {
		h := strings.TrimSpace(entry)
		switch {
		case h == "*":
			p.any = true
			continue
		case strings.HasPrefix(h, "*."):
			name, err := checkHostEntry(h[2:])
			if err != nil {
				return nil, fmt.Errorf("allowed host %q: %w", entry, err)
			}
			p.suffixes = append(p.suffixes, "."+name)
			continue
		}
		name, err := checkHostEntry(h)
		if err != nil {
			return nil, fmt.Errorf("allowed host %q: %w", entry, err)
		}
		p.names[name] = true
	}
	return p, nil
}

// checkHostEntry normalises one allow-list entry: a DNS name or an IP
// address (IPv6 with or without brackets), no port, no scheme.
func checkHostEntry(h string) (string, error) {
	if strings.HasPrefix(h, "[") && strings.HasSuffix(h, "]") {
		h = h[1 : len(h)-1]
	}
	if ip := net.ParseIP(h); ip != nil {
		return ip.String(), nil
	}
	if strings.Contains(h, ":") {
		return "", errors.New("want a host name or IP address without a port or scheme")
	}
	h = normHost(h)
	if h == "" || strings.ContainsAny(h, "/*?#@ \t[]") {
		return "", errors.New("want a host name, an IP address, *.domain or *")
	}
	return h, nil
}

// normHost lower-cases a name and drops a trailing dot ("localhost." is
// "localhost").
func normHost(h string) string {
	return strings.ToLower(strings.TrimSuffix(h, "."))
}

// allows reports whether a request's Host header (name or address, with
// or without a port) is one of the server's.
func (p *hostPolicy) allows(hostHeader string) bool {
	if p.any {
		return true
	}
	h := hostHeader
	if host, _, err := net.SplitHostPort(h); err == nil {
		h = host
	} else if strings.HasPrefix(h, "[") && strings.HasSuffix(h, "]") {
		h = h[1 : len(h)-1]
	}
	if h == "" {
		return false
	}
	if ip := net.ParseIP(h); ip != nil {
		return p.anyIP || ip.IsLoopback() || p.names[ip.String()]
	}
	h = normHost(h)
	if p.names[h] {
		return true
	}
	for _, s := range p.suffixes {
		if strings.HasSuffix(h, s) {
			return true
		}
	}
	return false
}

// unsafeMethod: the methods that change state (and that CSRF uses).
func unsafeMethod(m string) bool {
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		return false
	}
	return true
}

// requireJSON refuses a state-changing request whose body is not JSON:
// one that carries a body, or names a content type, must send
// application/json. What a page elsewhere can send without a CORS
// preflight (an HTML form, a "simple" fetch) never is.
func (s *Server) requireJSON(next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		ct := r.Header.Get("Content-Type")
		if ct == "" && r.ContentLength == 0 {
			next(w, r)
			return
		}
		if mt, _, err := mime.ParseMediaType(ct); err != nil || mt != "application/json" {
			writeError(w, http.StatusUnsupportedMediaType, CodeUnsupportedMediaType, "request body must be JSON, sent with Content-Type: application/json")
			return
		}
		next(w, r)
	}
}

// sameOrigin reports whether a request's Origin, when it has one, is the
// server as the client addressed it (the rule of the WebSocket library's
// own check, applied to Socket.IO and ahead of it for a JSON error).
func sameOrigin(r *http.Request) bool {
	o := r.Header.Get("Origin")
	if o == "" {
		return true
	}
	u, err := url.Parse(o)
	return err == nil && u.Host != "" && strings.EqualFold(u.Host, r.Host)
}

// checkOrigin writes 403 CROSS_ORIGIN and reports false when a WebSocket
// or Socket.IO request comes from another origin.
func checkOrigin(w http.ResponseWriter, r *http.Request) bool {
	if sameOrigin(r) {
		return true
	}
	writeError(w, http.StatusForbidden, CodeCrossOrigin, "cross-origin request refused: Origin "+strconvQuote(r.Header.Get("Origin"))+" is not this server")
	return false
}
