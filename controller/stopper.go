package controller

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/evoq/evoq/runstate"

	"github.com/evoq/evoq/broker"
	"github.com/evoq/evoq/schema"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/sirupsen/logrus"
)

// keptDecisions bounds the rung decisions the stopper keeps for questions
// still to come. A worker asks as soon as its report is stored, so an
// answer is wanted within moments of its report being read; a question
// about a report whose decision was dropped is answered "go on".
const keptDecisions = 1 << 16

// stopper runs the run's early-stopping rule: it folds the run's reports
// stream, in stream order, into Rungs, and answers the workers' questions
// (schema.Ask) with the decision the rule took at the report asked about.
// Its decisions are the fold's alone: a question only picks which one to
// send, so a restart and `evoq replay` decide as the run did.
//
// It runs beside the controller's loop, not in it: a question waits for
// the fold to reach its report, never for results to be folded or designs
// published.
type stopper struct {
	js       jetstream.JetStream
	run      string
	log      logrus.FieldLogger
	reported func()

	mu        sync.Mutex
	rungs     *runstate.Rungs
	folded    uint64 // stream sequence of the last report folded
	decisions map[uint64]schema.Decision
	order     []uint64 // keys of decisions, oldest first
	waiting   map[uint64][]waitingAsk
	replayTo  uint64 // reports stored when the stopper began; logged once folded
	began     time.Time
	badWarned time.Time

	stopConsume func()
	sub         *nats.Subscription
}

// waitingAsk is a question about a report not folded yet.
type waitingAsk struct {
	msg   *nats.Msg
	ask   *schema.Ask
	since time.Time
}

func newStopper(js jetstream.JetStream, run string, rule *schema.EarlyStop, log logrus.FieldLogger, reported func()) *stopper {
	return &stopper{js: js, run: run, log: log, reported: reported, rungs: runstate.NewRungs(run, rule),
		decisions: map[uint64]schema.Decision{}, waiting: map[uint64][]waitingAsk{}}
}

// start subscribes to the questions and reads the reports stream from its
// first report; stop ends both.
func (s *stopper) start(ctx context.Context) error {
	n, err := broker.CountReports(ctx, s.js, s.run)
	if err != nil {
		return fmt.Errorf("count reports: %w", err)
	}
	s.replayTo, s.began = n, time.Now()
	if s.sub, err = s.js.Conn().Subscribe(schema.AskSubject(s.run), s.onAsk); err != nil {
		return fmt.Errorf("subscribe to stop questions: %w", err)
	}
	cons, err := s.js.OrderedConsumer(ctx, schema.ReportStream, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{schema.ReportSubject(s.run)}, DeliverPolicy: jetstream.DeliverAllPolicy})
	if err != nil {
		_ = s.sub.Unsubscribe()
		return fmt.Errorf("consume reports: %w", err)
	}
	cc, err := cons.Consume(s.onReport, jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
		if ctx.Err() == nil {
			s.log.WithError(err).Warn("reading the reports stream: the consumer restarts from the last report read")
		}
	}))
	if err != nil {
		_ = s.sub.Unsubscribe()
		return fmt.Errorf("consume reports: %w", err)
	}
	s.stopConsume = cc.Stop
	return nil
}

func (s *stopper) stop() {
	if s.sub != nil {
		_ = s.sub.Unsubscribe()
	}
	if s.stopConsume != nil {
		s.stopConsume()
	}
}

// onReport folds one stored report and answers the questions that waited
// for it.
func (s *stopper) onReport(msg jetstream.Msg) {
	meta, err := msg.Metadata()
	if err != nil {
		return
	}
	rep, derr := schema.DecodeReport(msg.Data())
	s.mu.Lock()
	defer s.mu.Unlock()
	seq := meta.Sequence.Stream
	if seq <= s.folded {
		return // the ordered consumer restarted and reads it again
	}
	s.folded = seq
	if derr != nil {
		s.warnBad(seq, derr)
	} else if d, ok := s.rungs.Apply(rep); ok && d.Rung > 0 && !d.End {
		// A last report is not asked about: its worker knows it decides
		// nothing.
		s.keep(seq, schema.Decision{Run: s.run, DesignID: rep.DesignID, Step: rep.Step, Rung: d.Rung, Stop: d.Stop, Reason: d.Reason})
	}
	if s.reported != nil && derr == nil {
		s.reported()
	}
	for _, a := range s.waiting[seq] {
		s.answer(a.msg, a.ask)
	}
	delete(s.waiting, seq)
	if s.replayTo > 0 && s.rungs.Reports() > 0 && meta.NumPending == 0 {
		s.log.WithFields(logrus.Fields{"reports": s.rungs.Reports(), "stops": s.rungs.Stops(),
			"rungs_digest": s.rungs.Digest(), "replay_s": time.Since(s.began).Round(time.Millisecond).Seconds()}).
			Info("rebuilt the early-stopping rule's statistics from the reports stream")
		s.replayTo = 0
	}
}

// keep remembers the decision at seq for its question, dropping the
// oldest beyond keptDecisions.
func (s *stopper) keep(seq uint64, d schema.Decision) {
	s.decisions[seq] = d
	s.order = append(s.order, seq)
	if len(s.order) > keptDecisions {
		delete(s.decisions, s.order[0])
		s.order = s.order[1:]
	}
}

func (s *stopper) warnBad(seq uint64, err error) {
	if time.Since(s.badWarned) < time.Minute {
		return
	}
	s.badWarned = time.Now()
	s.log.WithError(err).WithField("stream_seq", seq).Warn("ignoring a report that does not decode (further ones are counted in silence for a minute)")
}

// onAsk answers a question at once when its report is folded, or keeps
// it until it is.
func (s *stopper) onAsk(msg *nats.Msg) {
	if !broker.Answerable(msg.Reply, s.run) {
		return // nowhere an answer may go
	}
	a, err := schema.DecodeAsk(msg.Data)
	if err != nil || a.Run != s.run {
		return // the worker's wait runs out, and its design goes on
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if a.StreamSeq <= s.folded {
		s.answer(msg, a)
		return
	}
	s.waiting[a.StreamSeq] = append(s.waiting[a.StreamSeq], waitingAsk{msg: msg, ask: a, since: time.Now()})
}

// answer sends the decision taken at the report at seq; a report the rule
// did not decide at (or whose decision is dropped) goes on.
func (s *stopper) answer(msg *nats.Msg, a *schema.Ask) {
	d, ok := s.decisions[a.StreamSeq]
	if !ok {
		d = schema.Decision{Run: s.run, DesignID: a.DesignID, Step: a.Step, Reason: "no rung decision at this report"}
	} else {
		delete(s.decisions, a.StreamSeq)
	}
	if b, err := schema.EncodeDecision(&d); err == nil {
		_ = msg.Respond(b)
	}
}

// prune drops questions whose askers have stopped waiting (worker.AskWait
// is 5 s): a question about a report that never comes, such as one that
// names a sequence past the stream's end, must not be kept for ever.
func (s *stopper) prune(now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for seq, as := range s.waiting {
		if now.Sub(as[0].since) > 30*time.Second {
			delete(s.waiting, seq)
		}
	}
}

func (s *stopper) summary() *runstate.EarlyStopSummary {
	s.mu.Lock()
	defer s.mu.Unlock()
	return runstate.Summarize(s.rungs)
}

// reports is how many reports the rule has judged.
func (s *stopper) reports() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rungs.Reports()
}

func (s *stopper) digest() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rungs.Digest()
}

// ReportsCatchUp bounds the wait, at the end of a run, for the stopper to
// fold every report stored: a broker that cannot deliver them for longer
// leaves the summary's rung statistics short, with a warning.
const ReportsCatchUp = 2 * time.Minute

// catchUp waits until every report of the run stored now is folded, so
// that a run ends with the rung statistics `evoq replay` finds: the
// reports stream is read beside the results, and a restarted controller
// whose run ends at once would otherwise end before reading it. It
// reports whether it caught up.
func (s *stopper) catchUp(ctx context.Context) bool {
	last, err := lastReportSeq(ctx, s.js, s.run)
	if err != nil {
		s.log.WithError(err).Warn("could not read the reports stream's last report; the rung statistics may lack the latest reports")
		return false
	}
	ctx, cancel := context.WithTimeout(ctx, ReportsCatchUp)
	defer cancel()
	for pause := time.Millisecond; ; pause = min(2*pause, 50*time.Millisecond) {
		s.mu.Lock()
		folded := s.folded
		s.mu.Unlock()
		if folded >= last {
			return true
		}
		select {
		case <-ctx.Done():
			s.log.WithFields(logrus.Fields{"folded": folded, "stored": last}).
				Warn("the run ends before every stored report was folded: its rung statistics lack the latest reports (evoq replay has them all)")
			return false
		case <-time.After(pause):
		}
	}
}

// lastReportSeq is the stream sequence of run's last stored report, 0
// when it has none.
func lastReportSeq(ctx context.Context, js jetstream.JetStream, run string) (uint64, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	st, err := js.Stream(ctx, schema.ReportStream)
	if err != nil {
		return 0, err
	}
	raw, err := st.GetLastMsgForSubject(ctx, schema.ReportSubject(run))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	return raw.Sequence, nil
}
