package api

// RouteInfo is a registered route, for tests.
type RouteInfo struct{ Method, Pattern string }

// Routes lists the route table (tests check it against openapi.json).
func Routes() []RouteInfo {
	var s Server
	var out []RouteInfo
	for _, r := range s.table() {
		out = append(out, RouteInfo{r.method, r.pattern})
	}
	return out
}

// RoutePatterns lists "METHOD pattern" of every route.
func RoutePatterns() []string {
	s := &Server{}
	var out []string
	for _, r := range append(s.table(), s.identityRoutes()...) {
		out = append(out, r.method+" "+r.pattern)
	}
	return out
}

// HasSessionAccess reports whether the access table names a route.
func HasSessionAccess(route string) bool {
	_, ok := sessionRoutes[route]
	return ok
}

// APIDoc renders the generated sections of docs/api.md (TestAPIDocIsCurrent
// keeps the file's copies current), by name: the route table, the bodies
// of its requests and answers, the event payloads and the block types.
func APIDoc() map[string]string { return apiDoc() }
