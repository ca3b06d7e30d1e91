package controller

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/evoq/evoq/runstate"

	"github.com/evoq/evoq/broker"
	"github.com/evoq/evoq/schema"
	"github.com/evoq/evoq/space"
	"github.com/sirupsen/logrus"
)

// Defaults of Config.
const (
	BudgetDefault = 200
	InitDefault   = runstate.InitDefault
	PoolDefault   = runstate.PoolDefault
	// TournamentDefault was 3 until it was measured on NAS-Bench-201
	// with novel children: 4 brought every seed of 20 to the optimum in
	// 300 evaluations, 3 left seeds on the next-best cells
	// (docs/BENCHMARKS.md, the suite table). A run records its
	// tournament, so a recorded run keeps its own.
	TournamentDefault = 4
	// TournamentLegacy is the tournament of runs recorded before their
	// tournament was kept: the default then.
	TournamentLegacy = 3
	ReplaceDefault   = runstate.ReplaceDefault
	// CrossoverDefault and MutationRateDefault are the variation
	// operators of a run that does not choose: most children are the
	// crossover of two tournament winners, and each is then mutated in one
	// parameter. Measured against the one-parameter mutation alone (the
	// operator before these were kept, still that of runs recorded then)
	// on zdt1, zdt2, the built-in mlp task and examples/pytorch:
	// docs/BENCHMARKS.md has the figures.
	CrossoverDefault    = 0.9
	MutationRateDefault = 0.0
	// CostTieDefault compares tournament entrants by fitness alone
	// (Config.CostTie): on the fidelity workload, whose evaluation times
	// are not heritable, preferring the cheaper of near-equal designs
	// cannot pay, and no workload here has heritable cost;
	// docs/BENCHMARKS.md has the figures.
	CostTieDefault = 0.0
	// NovelDefault makes children novel (Config.Novel): on NAS-Bench-201
	// a third of a default run's evaluations repeated a design already
	// measured; docs/BENCHMARKS.md has the figures.
	NovelDefault = true
	// NovelTries is how many children a novel run draws for one design
	// (the first half from the pool, the rest each the last mutated once
	// more) before it takes the last even though it was evaluated before.
	NovelTries  = 20
	SeedDefault = 1
	// MarginAuto, as Config.Margin, derives the margin from the live
	// slots (MarginFor).
	MarginAuto = -1
	// ProgressDefault is the period of the progress log line.
	ProgressDefault = 5 * time.Second
	// WaitSlotsTimeoutDefault bounds the wait for Config.WaitSlots.
	WaitSlotsTimeoutDefault = time.Minute
	// JoinGraceDefault is the time the expected slots have to join before
	// one failing host may fail the run: the spread of an allocation's
	// node starts, with room to spare.
	JoinGraceDefault = time.Minute
	// ErrorRetriesDefault retries a failed design once, elsewhere.
	ErrorRetriesDefault = 1
	// QuarantineAfterDefault quarantines a slot after three failed
	// attempts in a row: one failure is any design's bad luck, three in a
	// row while other slots succeed is the node.
	QuarantineAfterDefault = 3
)

// ErrConfig means a Config field is invalid: the error is a
// *schema.FieldError naming it, or a *SettingError.
var ErrConfig = errors.New("invalid controller config")

// Config configures a Controller.
type Config struct {
	// Run is the run ID. Required.
	Run string
	// Space is the search space. Required.
	Space *space.Space
	// Budget is the number of designs to evaluate: the run ends when that
	// many have a terminal result. Defaults to BudgetDefault.
	Budget int
	// Init is the number of random designs evaluated before mutants are
	// made. Defaults to InitDefault.
	Init int
	// Pool is the pool size; at most Init. Defaults to PoolDefault.
	Pool int
	// Replace is the pool's replacement policy. Defaults to ReplaceWorst.
	Replace runstate.Replace
	// Tournament is the tournament size for parent selection; at most
	// Pool. Defaults to min(TournamentDefault, Pool).
	Tournament int
	// Seed seeds every random choice; nil means not given. Defaults to
	// SeedDefault.
	Seed *uint64
	// Margin is the number of designs queued beyond the live slots, or
	// MarginAuto to derive it from the live slots with MarginFor. Defaults
	// to MarginAuto.
	Margin int
	// ExpectSlots sizes the consumer's limits (see broker.WaitingFor).
	// Defaults to 1; the limits never go below broker.MinWaiting.
	ExpectSlots int
	// WaitSlots makes the controller wait until that many slots are live
	// before publishing the first design. Defaults to 0, no wait.
	WaitSlots int
	// WaitSlotsTimeout bounds that wait; after it the run starts with the
	// slots present and a warning. Defaults to WaitSlotsTimeoutDefault.
	WaitSlotsTimeout time.Duration
	// AckWait and MaxDeliver configure the consumer; see broker.
	AckWait    time.Duration
	MaxDeliver int
	// ErrorRetries is how many failed (error or timeout) attempts of a
	// design are retried, each on another worker or host where one is
	// live, before a failure counts as the design's terminal result (see
	// Tally); 0 retries none. It decides which results count, so it is
	// fixed for the run's life. nil means not given. Defaults to
	// ErrorRetriesDefault.
	ErrorRetries *int
	// QuarantineAfter is the number of failed attempts in a row after
	// which a slot is quarantined, once another slot has an ok or
	// infeasible result: its worker stops feeding it and the controller
	// stops counting it (see Tally). 0 turns quarantine off. nil means
	// not given. Defaults to QuarantineAfterDefault.
	QuarantineAfter *int
	// EarlyStop is the run's early-stopping rule (see Rungs): a design
	// that reports its training as it goes (schema.Report) may be stopped
	// at a rung and end with status stopped. It decides which results the
	// run has, so it is fixed for the run's life. nil means not given;
	// a rule named RuleNone means none, explicitly. Defaults to none.
	// Its Select (whether stopped designs may be parents) defaults to
	// SelectDefault; SelectMedianDefault for the median rule, off for
	// several objectives.
	EarlyStop *schema.EarlyStop
	// Objectives are what the run optimizes, and the constraints on it
	// (see Objectives). It decides the pool, so it is fixed for the run's
	// life. Defaults to fitness:max alone.
	Objectives Objectives
	// HVRef is the hypervolume's reference point, one value per objective
	// in its own units (for a maximized objective, a value below every
	// design's). Defaults to one derived from the initial designs (see
	// hvTrack); read only with several objectives or constraints.
	HVRef []float64
	// Crossover is the probability that a new design is the crossover of
	// two tournament winners (space.Crossover) rather than a copy of
	// one; MutationRate the probability that the mutation alters each
	// parameter (space.MutateEach), 0 meaning exactly one parameter. They
	// make the designs, so they are fixed for the run's life. nil means
	// not given. Defaults to CrossoverDefault and MutationRateDefault.
	Crossover    *float64
	MutationRate *float64
	// CostTie makes a tournament compare two entrants whose fitness
	// differ by at most CostTie by the slot-seconds their evaluations
	// took, the cheaper winning (runstate.Pool.SetCostTie); 0 compares
	// fitness alone. It chooses the parents, so it is fixed for the
	// run's life. nil means not given. Defaults to CostTieDefault.
	CostTie *float64
	// Novel makes a child whose genome is one of the last
	// runstate.SeenWindow counted designs' again, up to NovelTries draws:
	// fixed for the run's life. nil means not given. Defaults to
	// NovelDefault.
	Novel *bool
	// Evaluator is what evaluates the run's designs, recorded so that
	// workers given none of their own run it, and a run that continues
	// keeps it. It decides what a result is, so it is fixed for the run's
	// life. nil means not given: a run that continues takes the recorded
	// one; a new run records none, and its workers must each name one.
	Evaluator *schema.Evaluator
	// Checkpoints are the run's checkpoint store and inheritance (see
	// CheckpointConfig).
	Checkpoints CheckpointConfig
	// Replicas is the number of copies of the streams and buckets, each on
	// another node of a JetStream cluster: 1, 3 or 5 (broker.WithReplicas),
	// at most the cluster's size. Defaults to 1.
	Replicas int
	// Progress is the period of the progress log line. Defaults to
	// ProgressDefault.
	Progress time.Duration
	// Seeds are genomes (from an earlier run) that become the run's first
	// designs, before any random one; they count toward Init. Each must
	// fit Space. Defaults to none.
	Seeds []map[string]any
	// SeedsFrom names the run Seeds were taken from, for the run's record.
	// Defaults to none.
	SeedsFrom string
	// IdleAlarm is how long a slot may idle, while the budget has designs
	// to hand out, before the controller warns with a diagnosis. Defaults
	// to IdleAlarmDefault; IdleAlarmOff (or any negative) turns it off.
	IdleAlarm time.Duration
	// FailFast is how many first attempts of the run are judged: when they
	// all end in error or timeout, none ok or infeasible, the controller
	// stops the run with phase failed and ErrFailed (see FailFast). It is
	// fixed when the run starts and recorded, so that a restart judges
	// the same attempts. Defaults to the larger of FailFastDefault,
	// ExpectSlots and WaitSlots: a run that expects many slots hears from
	// more of them before it gives up. FailFastOff turns the check off.
	FailFast int
	// Target ends the run once its best fitness reaches it: the designs
	// in flight finish, no others start. Defaults to none (nil).
	Target *float64
	// Plateau ends the run the same way once that many counted results in
	// a row did not improve its best. Defaults to none (0).
	Plateau int
	// TimeBudget ends the run that long after it first started: no design
	// starts that the evaluation times measured so far say cannot finish
	// before then, and at the end the designs in flight finish and the run
	// stops. Its end is recorded with the run, so a restart keeps it.
	// Defaults to none (0).
	TimeBudget time.Duration
	// Deadline is the time budget's end: set from the run's record, or
	// from the clock when a time budget starts. Not to be set by callers.
	Deadline time.Time
	// JoinGrace is how long after the run goes live the slots it expects
	// (ExpectSlots, WaitSlots) have to join before failures from one host
	// alone may fail the run (see FailFast): until then a node that fails
	// at once is quarantined, not the run's verdict. Defaults to
	// JoinGraceDefault.
	JoinGrace time.Duration
	// JoinHint says how a worker joins this run (a command line, say),
	// for the warning about a run without a live slot (see
	// NoSlotRepeatMax), which is given after IdleAlarm too. Defaults to
	// none.
	JoinHint string
	// OnProgress is called about every second, from the controller's
	// goroutine, with the run's progress; it must not block. Defaults to
	// nothing.
	OnProgress func(Progress)
	// Metrics receives the run's figures (see Metrics). Defaults to none.
	Metrics Metrics
	// OnResult is called from the controller's goroutine with every
	// stored result it folds, in stream order (those replayed at start
	// included), as decoded, err the decoding's error; it must not block.
	// A live dashboard in the controller's process is fed so, rather than
	// reading and decoding the results stream a second time. budget is
	// the run's budget as the controller judges the result, raised by
	// `evoq run extend`. Defaults to nothing.
	OnResult func(seq uint64, r *schema.Result, err error, budget int)
	// Now is the clock. Defaults to time.Now.
	Now func() time.Time
	// Logger defaults to logrus.StandardLogger().
	Logger logrus.FieldLogger
}

func (c Config) withDefaults() Config {
	setDefault(&c.Budget, BudgetDefault)
	setDefault(&c.Init, InitDefault)
	setDefault(&c.Pool, PoolDefault)
	setDefault(&c.Tournament, min(TournamentDefault, c.Pool))
	setDefault(&c.ExpectSlots, 1)
	setDefault(&c.Replicas, 1)
	if c.Replace == "" {
		c.Replace = ReplaceDefault
	}
	if c.Seed == nil {
		c.Seed = new(uint64(SeedDefault))
	}
	setDefault(&c.Margin, MarginAuto)
	if c.AckWait == 0 {
		c.AckWait = broker.AckWaitDefault
	}
	if c.MaxDeliver == 0 {
		c.MaxDeliver = broker.MaxDeliverDefault
	}
	if c.ErrorRetries == nil {
		c.ErrorRetries = new(ErrorRetriesDefault)
	}
	if c.QuarantineAfter == nil {
		c.QuarantineAfter = new(QuarantineAfterDefault)
	}
	if c.WaitSlotsTimeout <= 0 {
		c.WaitSlotsTimeout = WaitSlotsTimeoutDefault
	}
	if c.Progress <= 0 {
		c.Progress = ProgressDefault
	}
	if c.JoinGrace <= 0 {
		c.JoinGrace = JoinGraceDefault
	}
	if c.IdleAlarm == 0 {
		c.IdleAlarm = IdleAlarmDefault
	}
	setDefault(&c.FailFast, max(runstate.FailFastDefault, c.ExpectSlots, c.WaitSlots))
	if c.EarlyStop != nil && c.EarlyStop.Rule == RuleNone {
		c.EarlyStop = nil
	}
	if c.EarlyStop != nil && c.EarlyStop.Select == "" {
		e := *c.EarlyStop
		e.Select = SelectDefault
		switch {
		case e.Rule == schema.RuleMedian:
			e.Select = SelectMedianDefault
		case c.Objectives.Pareto():
			// A pool ranked by domination takes no stopped design.
			e.Select = schema.SelectOff
		}
		c.EarlyStop = &e
	}
	c.Checkpoints = c.Checkpoints.withDefaults()
	if c.Novel == nil {
		c.Novel = new(NovelDefault)
	}
	if c.Crossover == nil {
		c.Crossover = new(float64(CrossoverDefault))
	}
	if c.MutationRate == nil {
		c.MutationRate = new(float64(MutationRateDefault))
	}
	if c.CostTie == nil {
		c.CostTie = new(float64(CostTieDefault))
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = logrus.StandardLogger()
	}
	return c
}

func setDefault(v *int, d int) {
	if *v == 0 {
		*v = d
	}
}

// Validate checks c after defaults. Its errors are *schema.FieldError
// naming the Config field, and match ErrConfig.
func (c Config) Validate() error {
	c = c.withDefaults()
	if err := c.ValidateGiven(); err != nil {
		return err
	}
	if err := firstBad(
		check{c.Space == nil, "Space", nil, "no search space", nil},
		check{c.MaxDeliver < 1, "MaxDeliver", c.MaxDeliver, "need at least 1, or a design could never be delivered", nil},
	); err != nil {
		return err
	}
	if err := broker.CheckReplicas(c.Replicas); err != nil {
		return &schema.FieldError{Err: ErrConfig, Field: "Replicas", Value: c.Replicas, Reason: err.Error()}
	}
	for i, g := range c.Seeds {
		if _, err := c.Space.Validate(g); err != nil {
			return &schema.FieldError{Err: ErrConfig, Field: "Seeds", Reason: fmt.Sprintf("seed %d does not fit the search space: %v", i+1, err)}
		}
	}
	if len(c.Seeds) > c.Budget {
		return &schema.FieldError{Err: ErrConfig, Field: "Seeds", Reason: fmt.Sprintf("%d seeds exceed Budget %d", len(c.Seeds), c.Budget), Related: []string{"Budget"}}
	}
	return validateMaxStepGene(c.EarlyStop, c.Space)
}

// validateMaxStepGene checks that the rule's MaxStepGene, when it names
// one, is a number in every genome of sp: a name that matches nothing
// would leave every design's end unknown, and the rule judging designs at
// their last reports, with no word said.
func validateMaxStepGene(e *schema.EarlyStop, sp *space.Space) error {
	if e == nil || e.MaxStepGene == "" {
		return nil
	}
	if err := e.Validate(); err != nil {
		return &schema.FieldError{Err: ErrConfig, Field: "EarlyStop.MaxStepGene", Value: e.MaxStepGene, Reason: err.Error()}
	}
	// A sample genome shows the gene's type: every genome has each
	// top-level parameter, of its one type.
	if _, ok := e.End(sp.Random(rand.New(rand.NewPCG(1, 1)))); !ok {
		return &schema.FieldError{Err: ErrConfig, Field: "EarlyStop.MaxStepGene", Value: e.MaxStepGene,
			Reason: "is not a number parameter at the top of the search space (" + strings.Join(sp.Columns(), ", ") +
				"); it names the gene that holds each design's training length in report steps"}
	}
	return nil
}

// ValidateGiven checks what can be checked before a run that continues
// fills the unset (zero) fields from its record: each field set on its
// own, and fields that depend on each other where both are set. Validate
// checks everything once defaults are in.
func (c Config) ValidateGiven() error {
	if err := validateEarlyStop(c.EarlyStop); err != nil {
		return err
	}
	if e := c.EarlyStop; e != nil && (e.Select == schema.SelectReached || e.Select == schema.SelectPromoted) && c.Objectives.Pareto() {
		return &schema.FieldError{Err: ErrConfig, Field: "EarlyStop.Select", Value: e.Select,
			Reason: "a stopped design has no measured objectives, so a pool ranked by several objectives or constraints cannot take it; select off, or use one objective"}
	}
	if c.CostTie != nil && *c.CostTie > 0 && c.Objectives.Pareto() {
		return &schema.FieldError{Err: ErrConfig, Field: "CostTie", Value: *c.CostTie,
			Reason: "a pool ranked by several objectives or constraints compares its members by rank and crowding, never by a tie, so the cost tie would do nothing; make cost an objective instead (such as train_s:min), or use one objective"}
	}
	if c.Space != nil {
		if err := validateMaxStepGene(c.EarlyStop, c.Space); err != nil {
			return err
		}
	}
	if err := c.Checkpoints.validate(); err != nil {
		return err
	}
	if err := validateObjectives(c.Objectives, c.HVRef); err != nil {
		return err
	}
	return firstBad(
		check{c.Crossover != nil && !(*c.Crossover >= 0 && *c.Crossover <= 1), "Crossover", derefF(c.Crossover), "want a probability, 0 to 1", nil},
		check{c.MutationRate != nil && !(*c.MutationRate >= 0 && *c.MutationRate <= 1), "MutationRate", derefF(c.MutationRate),
			"want a probability, 0 to 1 (0: exactly one parameter per mutant)", nil},
		check{c.CostTie != nil && !(*c.CostTie >= 0 && !math.IsInf(*c.CostTie, 1)), "CostTie", derefF(c.CostTie),
			"want a fitness difference, 0 or more (0: fitness alone)", nil},
		check{derefF(c.CostTie) > 0 && c.Objectives.Pareto(), "CostTie", derefF(c.CostTie),
			"a pool ranked by several objectives or constraints compares by domination; make the cost an objective instead, or leave it out", []string{"Objectives"}},
		check{c.Objectives.Pareto() && c.Replace == runstate.ReplaceOldest, "Replace", string(c.Replace),
			"oldest ages the pool by fitness alone; a pool of several objectives or constraints keeps the best by domination rank: leave --replace out", []string{"Objectives"}},
		check{schema.ValidToken(c.Run) != nil, "Run", c.Run, reasonOf(schema.ValidToken(c.Run)), nil},
		check{c.Budget < 0, "Budget", c.Budget, "need at least 1", nil},
		check{c.Target != nil && (math.IsNaN(*c.Target) || math.IsInf(*c.Target, 0)), "Target", derefF(c.Target), "want a finite fitness", nil},
		check{c.Plateau < 0, "Plateau", c.Plateau, "need at least 1 result", nil},
		check{c.TimeBudget < 0, "TimeBudget", c.TimeBudget, "want a positive duration", nil},
		check{c.Init < 0, "Init", c.Init, "need at least 1", nil},
		check{c.Pool < 0, "Pool", c.Pool, "need at least 1", nil},
		check{c.Tournament < 0, "Tournament", c.Tournament, "need at least 1", nil},
		check{c.Replace != "" && c.Replace != runstate.ReplaceWorst && c.Replace != runstate.ReplaceOldest, "Replace", string(c.Replace), "want worst or oldest", nil},
		check{c.Margin < MarginAuto, "Margin", c.Margin, "must be at least 1, or MarginAuto", nil},
		check{c.ExpectSlots < 0, "ExpectSlots", c.ExpectSlots, "must be >= 0", nil},
		check{c.WaitSlots < 0, "WaitSlots", c.WaitSlots, "must be >= 0", nil},
		check{c.AckWait < 0 || (c.AckWait > 0 && c.AckWait < broker.MinAckWait), "AckWait", c.AckWait,
			fmt.Sprintf("need at least %s, three worker heartbeats; shorter, live workers would have their designs redelivered", broker.MinAckWait), nil},
		check{c.MaxDeliver < 0, "MaxDeliver", c.MaxDeliver, "need at least 1, or a design could never be delivered", nil},
		check{c.FailFast < runstate.FailFastOff, "FailFast", c.FailFast, "must be at least 1, or FailFastOff", nil},
		check{c.ErrorRetries != nil && *c.ErrorRetries < 0, "ErrorRetries", deref(c.ErrorRetries), "must be >= 0 (0 retries none)", nil},
		check{c.QuarantineAfter != nil && *c.QuarantineAfter < 0, "QuarantineAfter", deref(c.QuarantineAfter), "must be >= 0 (0 turns quarantine off)", nil},
		check{c.Progress < 0 || (c.Progress > 0 && c.Progress < 10*time.Millisecond), "Progress", c.Progress, "want at least 10ms", nil},
		check{c.Pool > 0 && c.Init > 0 && c.Pool > c.Init, "Pool", c.Pool,
			fmt.Sprintf("is larger than Init %d: the pool is filled from the initial random designs; raise Init or lower Pool", c.Init), []string{"Init", "Pool"}},
		check{c.Budget > 0 && c.Init > 0 && c.Budget < c.Init, "Budget", c.Budget,
			fmt.Sprintf("is smaller than Init %d: the search would never get past its random designs", c.Init), []string{"Init"}},
		check{c.Tournament > 0 && c.Pool > 0 && c.Tournament > c.Pool, "Tournament", c.Tournament,
			fmt.Sprintf("want 1..Pool (%d)", c.Pool), []string{"Pool"}},
	)
}

// RuleNone, as Config.EarlyStop's rule, says explicitly that the run
// stops no design early.
const RuleNone = runstate.RuleNone

// Defaults of an early-stopping rule's parameters.
const (
	MinStepDefault = 1
	EtaDefault     = 3
	// SelectDefault is whether a new asha run's stopped designs may be
	// parents (schema.EarlyStop.Select): with reached, on the fidelity
	// workload, ASHA's best at equal slot-seconds was 0.0064 higher in the
	// mean over four runs of 10 seeds than with off over five, whose
	// runs differ by a standard deviation of 0.0026; docs/BENCHMARKS.md
	// has the figures.
	// A median run takes SelectMedianDefault: its two measurements split.
	// A run of several objectives takes off: its pool cannot take a
	// stopped design. A run recorded before the field keeps off.
	SelectDefault       = schema.SelectReached
	SelectMedianDefault = schema.SelectOff
)

// validateEarlyStop checks a rule's parameters, naming the field of
// schema.EarlyStop as a Config field (EarlyStop.Eta).
func validateEarlyStop(e *schema.EarlyStop) error {
	if e == nil || e.Rule == RuleNone {
		return nil
	}
	return firstBad(
		check{e.Rule != schema.RuleMedian && e.Rule != schema.RuleASHA, "EarlyStop.Rule", e.Rule, "want none, median or asha", nil},
		check{e.MinStep < 1, "EarlyStop.MinStep", e.MinStep, "the first rung: need a step of at least 1", nil},
		check{e.Eta < 2, "EarlyStop.Eta", e.Eta, "need at least 2: rungs are MinStep times powers of Eta, and asha keeps the top 1/Eta at each", nil},
		check{!schema.SelectValid(e.Select), "EarlyStop.Select", e.Select, "want off, reached or promoted", nil},
		check{e.MaxStep < 0 || (e.MaxStep > 0 && e.MaxStep <= e.MinStep), "EarlyStop.MaxStep", e.MaxStep,
			fmt.Sprintf("the step of full training must lie above MinStep (%d), or be 0 for no bound", e.MinStep), []string{"EarlyStop.MinStep"}},
		check{e.Brackets < 0, "EarlyStop.Brackets", e.Brackets, "need at least 1", nil},
		check{e.Brackets > 1 && e.Rule != schema.RuleASHA, "EarlyStop.Brackets", e.Brackets,
			"brackets are asha's (asynchronous Hyperband); the median rule has one", []string{"EarlyStop.Rule"}},
		check{e.Brackets > 1 && e.MaxStep > 0 && e.Brackets > e.MaxBracketsFor(), "EarlyStop.Brackets", e.Brackets,
			fmt.Sprintf("the rungs below MaxStep %d (%v) make at most %d brackets, the last of which stops nothing: more would train every design of the rest to its end as well",
				e.MaxStep, e.Rungs(e.MaxStep), e.MaxBracketsFor()), []string{"EarlyStop.MaxStep", "EarlyStop.MinStep", "EarlyStop.Eta"}},
		check{e.Brackets > schema.MaxBrackets, "EarlyStop.Brackets", e.Brackets, fmt.Sprintf("at most %d", schema.MaxBrackets), nil},
	)
}

// EarlyStopWarning is what to warn of at the start of a run with rule e:
// with neither MaxStep nor MaxStepGene, nothing tells the rule where a
// design's training ends, so a design whose last report falls on a rung
// is judged there and may end stopped, though it trained to its end,
// unless its evaluator marks that report as its last. "" when there is
// nothing to warn of.
func EarlyStopWarning(e *schema.EarlyStop) string {
	if e == nil || e.Rule == RuleNone || e.MaxStep > 0 || e.MaxStepGene != "" {
		return ""
	}
	return "--early-stop without --max-step or --max-step-gene: a design whose last report falls on a rung (" +
		fmt.Sprint(e.Rungs(e.MinStep*int64(e.Eta)*int64(e.Eta))) + ", ...) is judged there and may be recorded stopped " +
		"though it trained to its end, unless its evaluator marks that report \"last\" (the evoq_eval helper does when " +
		"train_fn returns in one-shot mode, or with report(..., last=True)); give --max-step-gene with the gene " +
		"that holds each design's length, or --max-step"
}

// check is one rule of a Config: when bad, the field is invalid.
type check struct {
	bad     bool
	field   string
	value   any
	reason  string
	related []string
}

func firstBad(checks ...check) error {
	for _, ch := range checks {
		if ch.bad {
			return &schema.FieldError{Err: ErrConfig, Field: ch.field, Value: ch.value, Reason: ch.reason, Related: ch.related}
		}
	}
	return nil
}

// Fields are c's effective settings, for the start-up log line.
func (c Config) Fields() logrus.Fields {
	return logrus.Fields{
		"run": c.Run, "space": c.Space.Name(), "budget": c.Budget, "init": c.Init,
		"pool": c.Pool, "replace": c.Replace, "tournament": c.Tournament, "seed": seedText(c.Seed),
		"margin": runstate.MarginText(c.Margin), "ack_wait": c.AckWait, "max_deliver": c.MaxDeliver,
		"expect_slots": c.ExpectSlots, "wait_slots": c.WaitSlots, "replicas": c.Replicas,
		"fail_fast":     runstate.FailFastText(c.FailFast),
		"error_retries": deref(c.ErrorRetries), "quarantine_after": deref(c.QuarantineAfter),
		"early_stop": runstate.EarlyStopText(c.EarlyStop), "checkpoints": runstate.CheckpointText(c.Checkpoints.record()),
		"objectives": c.Objectives.String(), "variation": runstate.VariationText(c.variation()),
		"target": runstate.TargetText(c.Target), "plateau": runstate.PlateauText(c.Plateau), "time_budget": c.TimeBudget,
		"deadline": deadlineText(c.Deadline),
	}
}

// variation is c's operators as the run's record holds them.
func (c Config) variation() *schema.Variation {
	return &schema.Variation{Crossover: derefF(c.Crossover), MutationRate: derefF(c.MutationRate), Novel: c.Novel != nil && *c.Novel,
		CostTie: derefF(c.CostTie)}
}

func derefF(p *float64) float64 {
	if p == nil {
		return 0
	}
	return *p
}

// Rules are the counting rules c's settings give (see Tally); unset
// settings count as 0.
func (c Config) Rules() runstate.Rules {
	return runstate.Rules{ErrorRetries: deref(c.ErrorRetries), QuarantineAfter: deref(c.QuarantineAfter)}
}

// deref is *p, or 0 for nil.
func deref(p *int) int {
	if p == nil {
		return 0
	}
	return *p
}

func seedText(s *uint64) string {
	if s == nil {
		return "unset"
	}
	return fmt.Sprint(*s)
}

// reasonOf is err's reason, or "" when there is no error.
func reasonOf(err error) string {
	if err == nil {
		return ""
	}
	return schema.Reason(err)
}
