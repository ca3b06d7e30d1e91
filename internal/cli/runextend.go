package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/evoq/evoq/broker"
	"github.com/evoq/evoq/controller"
	"github.com/evoq/evoq/history"
	"github.com/evoq/evoq/schema"
	"github.com/nats-io/nats.go"
)

// runExtendCmd raises a live run's budget or time budget: it asks the
// run's controller, which records the raised limits with the run (each a
// change) and then applies them, so that a restart and `evoq replay`
// reach the same limits. It never writes the record itself: the
// controller writes the whole record, and would overwrite it.
type runExtendCmd struct {
	env        Env
	b          brokerFlags
	run        string
	budget     int
	timeBudget time.Duration
}

func (c *runExtendCmd) flagSet() *flag.FlagSet {
	fs := newFlagSet("run extend", "Raises a live run's --budget or --time-budget without restarting it (evoq run extend --run RUN --budget N).\n"+
		"It asks the run's controller, through the run's broker (--connect, --nats or $NATS_URL), which records the raise with the run; "+
		"a limit is only raised. On a broker with auth it needs the admin's connect file (--connect).", c.env.Stderr)
	fs.StringVar(&c.b.nats, "nats", "", "URL of the run's broker (default: $NATS_URL)")
	c.b.sec.register(fs, false, true)
	fs.StringVar(&c.run, "run", "", "the run whose limits to raise")
	fs.IntVar(&c.budget, "budget", 0, "the run's new budget, in designs: more than its budget now")
	fs.DurationVar(&c.timeBudget, "time-budget", 0, "the run's new time budget, counted from its first start as the one it replaces, such as 3h: longer than that one")
	return fs
}

// ExtendConnectWait bounds how long run extend tries to reach the run's
// broker.
const ExtendConnectWait = 20 * time.Second

func (c *runExtendCmd) Run(ctx context.Context, args []string) error {
	fs := c.flagSet()
	if err := parse(fs, args); err != nil {
		return err
	}
	if err := c.validate(fs); err != nil {
		return err
	}
	log, err := (&logFlags{format: "text", level: "error"}).logger(c.env.Stderr)
	if err != nil {
		return err
	}
	c.b.run = c.run // in operator mode the run is an account of its own
	s, err := open(&c.b, "evoq-run-extend", log)
	if err != nil {
		return err
	}
	defer s.close()
	// A live run's broker answers at once; one that does not is most
	// likely not the run's.
	cctx, cancel := context.WithTimeout(ctx, ExtendConnectWait)
	defer cancel()
	if err := s.waitConnected(cctx, log); err != nil {
		return err
	}
	ctx, cancel = context.WithTimeout(ctx, time.Minute+controller.ExtendWait)
	defer cancel()
	rep, err := c.ask(ctx, s)
	if err != nil {
		return err
	}
	if rep.Refused != "" {
		return usageErr("run %s: %s", c.run, rep.Refused)
	}
	fmt.Fprintf(c.env.Stdout, "run %s: budget %d", c.run, rep.Budget)
	if rep.TimeBudget > 0 {
		fmt.Fprintf(c.env.Stdout, ", time budget %s (ends at %s)", rep.TimeBudget, rep.Deadline.Local().Format(time.DateTime))
	}
	fmt.Fprintf(c.env.Stdout, "; raised at %s and recorded with the run\n", rep.At.Local().Format(time.DateTime))
	return nil
}

// validate checks the flags before anything connects: the run, at least
// one limit, each positive, a broker to reach, and a credential that may
// raise a run's limits.
func (c *runExtendCmd) validate(fs *flag.FlagSet) error {
	if c.run == "" {
		return usageErr("--run: name the run whose limits to raise")
	}
	if err := schema.ValidToken(c.run); err != nil {
		return usageErr("--run %q: %v", c.run, err)
	}
	if !isSet(fs, "budget") && !isSet(fs, "time-budget") {
		return usageErr("give --budget N or --time-budget D (or both): the limits to raise")
	}
	if isSet(fs, "budget") && c.budget < 1 {
		return usageErr("--budget %d: want the run's new budget, at least 1 design", c.budget)
	}
	if isSet(fs, "time-budget") && c.timeBudget <= 0 {
		return usageErr("--time-budget %s: want a positive duration, such as 3h", c.timeBudget)
	}
	if c.b.nats == "" && c.b.sec.connect == "" {
		// A live run's broker is served by its controller (or a broker of
		// its own): a store directory would start a second broker on it.
		if c.b.nats = os.Getenv("NATS_URL"); c.b.nats == "" {
			return usageErr("name the live run's broker: --connect FILE (on a broker with auth, the admin's connect file) or --nats URL (or $NATS_URL)")
		}
	}
	if err := c.b.validate(); err != nil {
		return err
	}
	if cr := c.b.sec.credential; cr != nil && cr.Role != broker.RoleAdmin && cr.Role != broker.RoleSite {
		return usageErr("--connect %s holds a %s credential, which may not raise a run's limits: give the admin's connect file ('evoq broker --connect-file', or one naming the trust root)", c.b.sec.connect, cr.Role)
	}
	return nil
}

// ask sends the request to the run's controller and waits for its
// answer. With no controller to answer, it reads the run's record to say
// what to do instead.
func (c *runExtendCmd) ask(ctx context.Context, s *session) (*schema.ExtendReply, error) {
	body, err := schema.EncodeExtend(&schema.Extend{Run: c.run, Budget: c.budget, TimeBudget: c.timeBudget, Sent: time.Now()})
	if err != nil {
		return nil, err
	}
	actx, cancel := context.WithTimeout(ctx, controller.ExtendWait)
	defer cancel()
	msg, err := s.nc.RequestWithContext(actx, schema.ExtendSubject(c.run), body)
	// A controller subscribes a moment after it has written its connect
	// files and its record: asked just then, nobody answers yet.
	for wait := time.Now().Add(extendStartWait); errors.Is(err, nats.ErrNoResponders) && time.Now().Before(wait) && c.mayStart(actx, s); {
		select {
		case <-actx.Done():
		case <-time.After(extendRetry):
		}
		msg, err = s.nc.RequestWithContext(actx, schema.ExtendSubject(c.run), body)
	}
	switch {
	case errors.Is(err, nats.ErrNoResponders):
		return nil, c.noController(ctx, s)
	case errors.Is(err, context.DeadlineExceeded):
		return nil, fmt.Errorf("run %s: its controller did not answer within %s (a controller replaying a long run answers once it is done): try again; nothing was raised", c.run, controller.ExtendWait)
	case err != nil:
		return nil, fmt.Errorf("ask run %s's controller: %w", c.run, err)
	}
	return schema.DecodeExtendReply(msg.Data)
}

// extendStartWait bounds how long run extend asks again a run whose
// controller has not subscribed yet, every extendRetry.
const (
	extendStartWait = 5 * time.Second
	extendRetry     = 200 * time.Millisecond
)

// mayStart says whether the run is on the broker and not ended, so that
// its controller may be about to answer.
func (c *runExtendCmd) mayStart(ctx context.Context, s *session) bool {
	ri, err := history.FromJS(s.js).Pick(ctx, c.run)
	return err == nil && ri.Run != nil && ri.Phase != schema.PhaseDone && ri.Phase != schema.PhaseFailed
}

// noController says why no controller answered: the run has ended (what
// to do instead), is not on this broker, or has no live controller.
func (c *runExtendCmd) noController(ctx context.Context, s *session) error {
	ri, err := history.FromJS(s.js).Pick(ctx, c.run)
	if err != nil {
		return err
	}
	if ri.Run != nil && (ri.Phase == schema.PhaseDone || ri.Phase == schema.PhaseFailed) {
		reason := ri.Run.StopReason
		if ri.Phase == schema.PhaseFailed {
			reason = schema.StopFailed
		}
		return usageErr("%s", controller.EndedAdvice(c.run, reason))
	}
	return fmt.Errorf("run %s (phase %s) has no live controller to raise its limits: start its controller again with the larger limit (evoq controller --run %s --budget N, or --time-budget D), which records it as a change", c.run, ri.Phase, c.run)
}
