package broker

import (
	"context"
	"time"

	"github.com/evoq/evoq/schema"
	"github.com/nats-io/nats.go/jetstream"
)

// ReportFunc receives one stored report: its stream sequence and time, and
// the decoded report or why it did not decode. Returning ErrStopReading
// ends the read; any other error ends it with that error.
type ReportFunc func(seq uint64, t time.Time, r *schema.Report, err error) error

// ReadReports hands fn the intermediate reports of run in stream order,
// as ReadResults does its results. A store from before reports existed
// has none.
func ReadReports(ctx context.Context, js jetstream.JetStream, run string, fn ReportFunc) error {
	return readRun(ctx, js, schema.ReportStream, schema.ReportSubject(run), "reports", func(seq uint64, t time.Time, data []byte) error {
		rep, err := schema.DecodeReport(data)
		return fn(seq, t, rep, err)
	})
}

// CountReports is the number of stored reports of run.
func CountReports(ctx context.Context, js jetstream.JetStream, run string) (uint64, error) {
	return countSubject(ctx, js, schema.ReportStream, schema.ReportSubject(run))
}
