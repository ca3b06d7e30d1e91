// Package metrics exposes a controller's and a worker's figures to
// Prometheus (`--metrics ADDR`). Updates are atomic and never block.
package metrics

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/evoq/evoq/controller"
	"github.com/evoq/evoq/schema"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/sirupsen/logrus"
)

// Controller holds the controller's metrics; it is the controller's
// Config.Metrics.
type Controller struct {
	Registry    *prometheus.Registry
	queued      prometheus.Gauge
	inFlight    prometheus.Gauge
	slotsLive   prometheus.Gauge
	slotsBusy   prometheus.Gauge
	best        prometheus.Gauge
	budget      prometheus.Gauge
	evaluations *prometheus.CounterVec
	quarantined prometheus.Gauge
	reports     prometheus.Counter
	checkpoints prometheus.Gauge
	hv          prometheus.Gauge
	front       prometheus.Gauge
	retries     atomic.Int64 // read by a counter on every scrape
	ranked      bool         // front registered
	hvSet       bool         // hypervolume registered
}

// NewController registers the controller's metrics for run.
func NewController(run string) *Controller {
	labels := prometheus.Labels{"run": run}
	g := func(name, help string) prometheus.Gauge {
		return prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: help, ConstLabels: labels})
	}
	m := &Controller{
		Registry:  prometheus.NewRegistry(),
		queued:    g("evoq_queue_depth", "Designs waiting on the work queue for a slot."),
		inFlight:  g("evoq_in_flight", "Designs published and without a terminal result."),
		slotsLive: g("evoq_slots_live", "Worker slots with a recent heartbeat."),
		slotsBusy: g("evoq_slots_busy", "Live slots evaluating a design."),
		best:      g("evoq_best_fitness", "Best fitness so far."),
		budget:    g("evoq_budget", "Designs the run evaluates."),
		evaluations: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "evoq_evaluations_total",
			Help: "Designs with a terminal result, by status.", ConstLabels: labels}, []string{"status"}),
		quarantined: g("evoq_slots_quarantined", "Live workers' slots quarantined after failing their designs in a row: they take no designs."),
		checkpoints: g("evoq_checkpoints", "Checkpoints in the run's store: at most the pool and the designs in flight."),
		hv:          g("evoq_hypervolume", "Hypervolume of the pool's front from the run's reference point (runs of several objectives; absent until the point is known)."),
		front:       g("evoq_front_size", "Designs on the pool's front (runs of several objectives)."),
		reports: prometheus.NewCounter(prometheus.CounterOpts{Name: "evoq_reports_total",
			Help: "Intermediate reports (fitness at a step) the controller read from the reports stream.", ConstLabels: labels}),
	}
	// The controller counts retries in its fold, replay included; the
	// counter reads that count rather than keeping a second one.
	retries := prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "evoq_retries_total",
		Help: "Failed attempts (error or timeout) retried on another worker instead of counting.", ConstLabels: labels},
		func() float64 { return float64(m.retries.Load()) })
	m.Registry.MustRegister(m.queued, m.inFlight, m.slotsLive, m.slotsBusy, m.best, m.budget, m.evaluations, m.quarantined, m.reports, m.checkpoints, retries)
	for _, s := range schema.Statuses {
		m.evaluations.WithLabelValues(string(s))
	}
	return m
}

var _ controller.Metrics = (*Controller)(nil)

// Observe implements controller.Metrics: it sets the gauges.
func (m *Controller) Observe(s controller.Snapshot) {
	m.queued.Set(float64(s.Queued))
	m.inFlight.Set(float64(s.InFlight))
	m.slotsLive.Set(float64(s.SlotsLive))
	m.slotsBusy.Set(float64(s.SlotsBusy))
	m.budget.Set(float64(s.Budget))
	m.quarantined.Set(float64(s.SlotsQuarantined))
	m.checkpoints.Set(float64(s.Checkpoints))
	m.retries.Store(int64(s.Retries))
	if s.Best != nil {
		m.best.Set(*s.Best)
	}
	if s.Front > 0 && !m.ranked {
		// Registered only for a run that has a front, so that a run of
		// one fitness does not show a hypervolume of 0.
		m.ranked = true
		m.Registry.MustRegister(m.front)
	}
	m.front.Set(float64(s.Front))
	if s.Hypervolume != nil {
		if !m.hvSet {
			m.hvSet = true
			m.Registry.MustRegister(m.hv)
		}
		m.hv.Set(*s.Hypervolume)
	}
}

// Counted implements controller.Metrics: it counts the result by status.
func (m *Controller) Counted(r *schema.Result) { m.evaluations.WithLabelValues(string(r.Status)).Inc() }

// Reported counts one intermediate report the controller read; the
// controller calls it once per report, in stream order, replayed ones
// included, as it calls Counted per result.
func (m *Controller) Reported() { m.reports.Inc() }

// Worker holds a worker's metrics.
type Worker struct {
	Registry    *prometheus.Registry
	evaluations *prometheus.CounterVec
	duration    *prometheus.HistogramVec
	gap         prometheus.Histogram
}

// NewWorker registers a worker's metrics; slots and busy are read on
// every scrape.
func NewWorker(run, worker string, slots int, busy func() int) *Worker {
	labels := prometheus.Labels{"run": run, "worker": worker}
	m := &Worker{
		Registry: prometheus.NewRegistry(),
		evaluations: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "evoq_worker_evaluations_total",
			Help: "Evaluations this worker stored, by status.", ConstLabels: labels}, []string{"status"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "evoq_evaluation_duration_seconds",
			Help: "Evaluation wall time, by status.", ConstLabels: labels,
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 12)}, []string{"status"}),
		gap: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "evoq_dispatch_gap_seconds",
			Help: "Time a slot spent between storing a result and starting its next design.", ConstLabels: labels,
			Buckets: prometheus.ExponentialBuckets(0.0001, 4, 12)}),
	}
	m.Registry.MustRegister(m.evaluations, m.duration, m.gap,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "evoq_worker_slots", Help: "Slots of this worker.", ConstLabels: labels},
			func() float64 { return float64(slots) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "evoq_worker_slots_busy", Help: "Slots evaluating now.", ConstLabels: labels},
			func() float64 { return float64(busy()) }))
	return m
}

// Stored records one stored result.
func (m *Worker) Stored(r *schema.Result) {
	m.evaluations.WithLabelValues(string(r.Status)).Inc()
	m.duration.WithLabelValues(string(r.Status)).Observe(r.Duration().Seconds())
	if r.Gap >= 0 {
		m.gap.Observe(r.Gap.Seconds())
	}
}

// Serve exposes reg on addr at /metrics until ctx ends. The listener is
// opened before Serve returns, so a taken port is reported at start.
func Serve(ctx context.Context, addr string, reg *prometheus.Registry, log logrus.FieldLogger) error {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("--metrics %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.WithError(err).Error("metrics server stopped")
		}
	}()
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	log.WithField("addr", l.Addr().String()).Info("metrics at /metrics")
	return nil
}
