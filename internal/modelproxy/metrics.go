package modelproxy

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/agentd/agentd/conversation"
)

// Metrics are the proxy's Prometheus series. A nil *Metrics records
// nothing. Labels are bounded (provider, status, token type): per-session
// counts are in the audit log, not in labels.
type Metrics struct {
	requests *prometheus.CounterVec
	tokensC  *prometheus.CounterVec
	refusals *prometheus.CounterVec
	seconds  *prometheus.HistogramVec
}

// NewMetrics registers the proxy's metrics with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "agentd_model_proxy_requests_total",
			Help: "Model-API requests through the proxy, by provider and HTTP status."}, []string{"provider", "status"}),
		tokensC: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "agentd_model_proxy_tokens_total",
			Help: "Tokens the proxied answers reported, by provider and type (input, output, cache_read, cache_creation)."}, []string{"provider", "type"}),
		refusals: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "agentd_model_proxy_refusals_total",
			Help: "Requests the proxy refused, by provider and reason (unauthorized, budget)."}, []string{"provider", "reason"}),
		seconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "agentd_model_proxy_request_seconds",
			Help:    "Time from a proxied request's arrival to the end of its answer, by provider.",
			Buckets: []float64{0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300}}, []string{"provider"}),
	}
	reg.MustRegister(m.requests, m.tokensC, m.refusals, m.seconds)
	return m
}

func (m *Metrics) request(p Provider, status int) {
	if m != nil {
		m.requests.WithLabelValues(label(p), strconv.Itoa(status)).Inc()
	}
}

func (m *Metrics) refused(p Provider, reason string) {
	if m != nil {
		m.refusals.WithLabelValues(label(p), reason).Inc()
	}
}

func (m *Metrics) duration(p Provider, d time.Duration) {
	if m != nil {
		m.seconds.WithLabelValues(label(p)).Observe(d.Seconds())
	}
}

func (m *Metrics) tokens(p Provider, u conversation.Usage) {
	if m == nil {
		return
	}
	l := label(p)
	m.tokensC.WithLabelValues(l, "input").Add(float64(u.InputTokens))
	m.tokensC.WithLabelValues(l, "output").Add(float64(u.OutputTokens))
	m.tokensC.WithLabelValues(l, "cache_read").Add(float64(u.CacheReadInputTokens))
	m.tokensC.WithLabelValues(l, "cache_creation").Add(float64(u.CacheCreationInputTokens))
}

// label keeps unknown path prefixes out of the label values.
func label(p Provider) string {
	if _, ok := specOf(p); ok {
		return string(p)
	}
	return "other"
}
