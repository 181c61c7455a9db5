package metrics

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

// The webhook notifications' metrics (internal/notify). Labels are a
// namespace or a reason from a fixed set.
var (
	// NotifySent counts notifications a receiver accepted (a 2xx answer).
	NotifySent = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: namespace,
		Name:      "notifications_sent_total",
		Help:      "Webhook notifications a receiver accepted with a 2xx answer, by namespace.",
	}, []string{"namespace"})

	// NotifyFailed counts failed delivery attempts; each is retried until
	// the message is too old. reason is one of timeout, connection, status
	// (a non-2xx answer), config (the namespace's configuration is wrong) or
	// refused (the receiver's address is internal and not allowed).
	NotifyFailed = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: namespace,
		Name:      "notification_attempts_failed_total",
		Help:      "Failed webhook delivery attempts, by namespace and reason (timeout, connection, status, config, refused).",
	}, []string{"namespace", "reason"})

	// NotifyDropped counts notifications given up: queue_full (the oldest
	// waiting one made room for a new one), expired (retried past the
	// maximum age) or invalid (its data could not be encoded).
	NotifyDropped = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: namespace,
		Name:      "notifications_dropped_total",
		Help:      "Webhook notifications given up, by reason (queue_full, expired, invalid).",
	}, []string{"reason"})

	// NotifyQueueDepth is the number of notifications waiting or in flight.
	NotifyQueueDepth = prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: namespace,
		Name:      "notification_queue_depth",
		Help:      "Webhook notifications waiting for delivery or in flight.",
	})
)

var registerNotifyOnce sync.Once

// RegisterNotify adds the notification metrics to controller-runtime's
// registry; safe to call more than once.
func RegisterNotify() {
	registerNotifyOnce.Do(func() {
		ctrlmetrics.Registry.MustRegister(NotifySent, NotifyFailed, NotifyDropped, NotifyQueueDepth)
	})
}
