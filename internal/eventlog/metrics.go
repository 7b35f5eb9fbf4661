package eventlog

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	appended prometheus.Counter
	failed   prometheus.Counter
	batch    prometheus.Histogram
	commit   prometheus.Histogram
	latency  prometheus.Histogram
	subs     prometheus.Gauge
	slow     prometheus.Counter
	peerMsgs prometheus.Counter
	gapFills prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		appended: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "agentd_events_appended_total", Help: "Events durably appended to the event log.",
		}),
		failed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "agentd_event_append_failures_total", Help: "Event log store transactions that failed.",
		}),
		batch: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "agentd_event_commit_batch_size", Help: "Events per store transaction (group commit).",
			Buckets: prometheus.ExponentialBuckets(1, 4, 8),
		}),
		commit: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "agentd_event_commit_seconds", Help: "Duration of one event store transaction.",
			Buckets: prometheus.ExponentialBuckets(0.00005, 2, 16),
		}),
		latency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "agentd_event_append_latency_seconds", Help: "Time from Append to durable and published.",
			Buckets: prometheus.ExponentialBuckets(0.00005, 2, 16),
		}),
		subs: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "agentd_event_subscribers", Help: "Open event log subscriptions.",
		}),
		slow: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "agentd_event_slow_consumers_total", Help: "Subscribers disconnected for falling behind.",
		}),
		peerMsgs: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "agentd_event_peer_messages_total", Help: "Messages of other servers' commits handled (a fleet).",
		}),
		gapFills: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "agentd_event_peer_gap_fills_total", Help: "Times subscribers were brought up to date from the store (a missed peer message, a notice, a take-over).",
		}),
	}
	if reg != nil {
		reg.MustRegister(m.appended, m.failed, m.batch, m.commit, m.latency, m.subs, m.slow, m.peerMsgs, m.gapFills)
	}
	return m
}

func (m *metrics) observeCommit(n int, d time.Duration, err error) {
	if err != nil {
		m.failed.Inc()
		return
	}
	m.appended.Add(float64(n))
	m.batch.Observe(float64(n))
	m.commit.Observe(d.Seconds())
}
