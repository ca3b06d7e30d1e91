package bench

import (
	"context"
	"errors"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/evoq/evoq/schema"
)

// A study's trials lie end to end after its process's start, which holds
// its slot without a result; only complete trials are ok.
func TestTrialSpans(t *testing.T) {
	t.Parallel()
	got := trialSpans(2, []train20Trial{{State: "complete", Value: 0.5, Seconds: 1},
		{State: "pruned", Value: 0.7, Seconds: 0.25}, {State: "complete", Value: 0.6, Seconds: 3}})
	want := []span{{0, 2, false, 0, 0}, {2, 3, true, 0.5, 0}, {3, 3.25, false, 0.7, 0}, {3.25, 6.25, true, 0.6, 0}}
	if !slices.Equal(got, want) {
		t.Fatalf("spans %+v, want %+v", got, want)
	}
	if best, _ := bestUntil(got, 100); best != 0.6 {
		t.Errorf("best %v: a pruned trial's last report counts as none", best)
	}
	if got := trialSpans(0, []train20Trial{{State: "complete", Value: 0.5, Seconds: 1}}); len(got) != 1 || got[0].start != 0 {
		t.Errorf("no start: spans %+v", got)
	}
}

// In epochs, results count in the order they ended, up to the full
// run's epochs; a stopped design's epochs count, its fitness does not.
func TestAtEqualEpochs(t *testing.T) {
	t.Parallel()
	spans := []span{{start: 0, stop: 5, ok: true, fitness: 0.7, epochs: 30}, {start: 0, stop: 1, fitness: 0.9, epochs: 3},
		{start: 1, stop: 2, ok: true, fitness: 0.6, epochs: 30}, {start: 5, stop: 9, ok: true, fitness: 0.8, epochs: 30}}
	tests := []struct {
		name     string
		fullBest float64
		epochs   int
		want     EpochFigure
	}{
		{"all within", 0.7, 93, EpochFigure{Epochs: 93, BestAtEqual: 0.8, Reached: true, ReachedShare: sig4(63.0 / 93)}},
		{"cut before the last", 0.7, 90, EpochFigure{Epochs: 93, BestAtEqual: 0.7, Reached: true, ReachedShare: 0.7}},
		{"reached past the cut", 0.8, 63, EpochFigure{Epochs: 93, BestAtEqual: 0.7, Reached: true, ReachedShare: sig4(93.0 / 63)}},
		{"never reached", 0.85, 63, EpochFigure{Epochs: 93, BestAtEqual: 0.7}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := atEqualEpochs("asha", spans, tt.fullBest, tt.epochs)
			tt.want.Rule, tt.want.Delta = "asha", tt.want.BestAtEqual-tt.fullBest
			if *got != tt.want {
				t.Fatalf("%+v, want %+v", *got, tt.want)
			}
		})
	}
	if spanEpochs(spans) != 93 {
		t.Errorf("spanEpochs %d", spanEpochs(spans))
	}
}

// The runs of a seed differ in the rule's flags and --inherit alone, and
// the extra flags come last, so that they override the workload's.
func TestTrain20Args(t *testing.T) {
	t.Parallel()
	s := train20Settings(Config{Train20Args: []string{"--pool", "12"}})
	f := train20Files{evalCmd: "py train20.py h 30", space: "space.yaml", baseline: "b.py"}
	full := s.args(f, 2, ruleNone, false)
	asha := s.args(f, 2, schema.RuleASHA, false)
	inherit := s.args(f, 2, ruleNone, true)
	flag := func(args []string, name string) string {
		i := slices.Index(args, name)
		if i < 0 || i+1 >= len(args) {
			return ""
		}
		return args[i+1]
	}
	if flag(full, "--run") != "train20-s2" || flag(asha, "--run") != "train20-s2" || flag(full, "--early-stop") != "" ||
		slices.Contains(full, "--inherit") || !slices.Contains(inherit, "--inherit") || flag(full, "--budget") != "40" {
		t.Errorf("full %v, inherit %v", full, inherit)
	}
	if flag(asha, "--early-stop") != "asha" || flag(asha, "--min-step") != "3" || flag(asha, "--eta") != "3" ||
		flag(asha, "--max-step") != "30" || flag(asha, "--budget") != "200" {
		t.Errorf("asha %v", asha)
	}
	if !slices.Equal(full[len(full)-2:], []string{"--pool", "12"}) {
		t.Errorf("extra flags not last: %v", full)
	}
	for _, bad := range [][]string{{"--budget", "9"}, {"--inherit"}, {"-early-stop=asha"}, {"--pool", "4", "--slots=4"}} {
		if err := validateTrain20Args("Train20Args", bad); !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "Train20Args") {
			t.Errorf("Train20Args %v: %v, want refused", bad, err)
		}
	}
	if err := validateTrain20Args("Train20Args", []string{"--pool", "12", "--tournament=3"}); err != nil {
		t.Errorf("search settings refused: %v", err)
	}
	// Rule flags go to the rule runs alone, after the workload's; the
	// first rung moves evoq's rules and Optuna's pruners together.
	r := train20Settings(Config{Train20RuleArgs: []string{"--brackets", "3"}, Train20MinStep: 9, Train20Rules: []string{"asha"}, Train20NoInherit: true})
	ruled, plain := r.args(f, 1, schema.RuleASHA, false), r.args(f, 1, ruleNone, false)
	if flag(ruled, "--brackets") != "3" || flag(ruled, "--min-step") != "9" || slices.Contains(plain, "--brackets") ||
		!slices.Equal(r.Rules, []string{"asha"}) || r.Inherit {
		t.Errorf("rule args: asha %v, full %v, settings %+v", ruled, plain, r)
	}
	if smoke := train20Settings(Config{Smoke: true, Seeds: 2}); smoke.Seeds != 2 || smoke.Epochs >= s.Epochs || smoke.MinStep >= smoke.Epochs {
		t.Errorf("smoke settings %+v", smoke)
	}
}

// Each target fails on its own figure; asha is judged against the better
// of the Optuna studies with a pruner, and without them that target is
// not met.
func TestTrain20Judge(t *testing.T) {
	t.Parallel()
	share := func(f float64) *float64 { return &f }
	med := func(rule string, atEqual, delta float64, reached *float64) *FidelityMedian {
		return &FidelityMedian{Rule: rule, BestAtEqual: atEqual, Delta: delta, ReachedShare: reached}
	}
	optuna := []*FidelityMedian{med("optuna tpe, pruner none", 0.72, 0, nil),
		med("optuna tpe, pruner hyperband", 0.70, 0, nil), med("optuna tpe, pruner median", 0.705, 0, nil)}
	tests := []struct {
		name   string
		asha   *FidelityMedian
		noBase bool
		want   [3]bool // equal, vs optuna, reach
		best   string
	}{
		{"all met", med("asha", 0.71, 0.01, share(0.3)), false, [3]bool{true, true, true}, "optuna tpe, pruner median"},
		{"below full", med("asha", 0.71, -0.001, share(0.3)), false, [3]bool{false, true, true}, "optuna tpe, pruner median"},
		{"below the better pruner", med("asha", 0.704, 0.01, share(0.3)), false, [3]bool{true, false, true}, "optuna tpe, pruner median"},
		{"reached late", med("asha", 0.71, 0.01, share(0.36)), false, [3]bool{true, true, false}, "optuna tpe, pruner median"},
		{"never reached", med("asha", 0.71, 0.01, nil), false, [3]bool{true, true, false}, "optuna tpe, pruner median"},
		{"no baselines", med("asha", 0.71, 0.01, share(0.3)), true, [3]bool{true, false, true}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr := &Train20{Settings: Train20Settings{Baselines: !tt.noBase}, Medians: []*FidelityMedian{med("median", 0.9, 0.1, share(0.1)), tt.asha}}
			if !tt.noBase {
				tr.Medians = append(tr.Medians, optuna...)
			}
			tr.judge()
			got := [3]bool{tr.EqualMet, tr.VsOptunaMet, tr.ReachMet}
			if got != tt.want || tr.Met != (tt.want == [3]bool{true, true, true}) || tr.BestPruner != tt.best {
				t.Fatalf("verdicts %v met %v best pruner %q, want %v and %q", got, tr.Met, tr.BestPruner, tt.want, tt.best)
			}
			var b strings.Builder
			tr.Print(&b, false)
			out := b.String()
			if missed := strings.Contains(out, "MISSED") || strings.Contains(out, "not judged"); missed == tr.Met || !strings.Contains(out, "(c) asha") {
				t.Fatalf("printed:\n%s", out)
			}
		})
	}
}

// The train20 workload runs end to end in its smoke form, with the evoq
// binary built here, the Python helper of the repository and Debian's
// torch and Optuna: every evoq run's results are read back from its
// store, and every study's trials are laid out in slot-seconds.
func TestTrain20Smoke(t *testing.T) {
	t.Parallel()
	bin := smokeEvoq(t)
	if err := exec.Command(PythonDefault, "-c", "import torch, sklearn, optuna").Run(); err != nil {
		t.Skipf("SKIPPED: %s cannot import torch, sklearn and optuna (%v): apt-get install python3-torch python3-sklearn python3-optuna",
			PythonDefault, err)
	}
	// Each of its 11 Python processes imports torch: on a 2-core machine
	// shared with compilers the smoke run took nearly 4 minutes.
	ctx, cancel := context.WithTimeout(t.Context(), 8*time.Minute)
	defer cancel()
	rep, err := Run(ctx, Config{Evoq: bin, Workloads: []string{"train20"}, Smoke: true, Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Rows) != 1 || rep.Rows[0].Train20 == nil || rep.Rows[0].Met != nil {
		t.Fatalf("rows %+v", rep.Rows)
	}
	tr := rep.Rows[0].Train20
	s := train20Settings(Config{Smoke: true})
	if len(tr.Seeds) != 1 || len(tr.Medians) != len(fidelityRules)+len(train20Pruners) || tr.Inherit == nil {
		t.Fatalf("train20 %+v", tr)
	}
	ts := tr.Seeds[0]
	if ts.Full.OK != s.Budget || ts.Full.Stopped != 0 || ts.Full.SlotS <= 0 || ts.Full.Best <= 1.0/20 || ts.Full.Best > 1 {
		t.Errorf("full run %+v: want its budget trained to the end, an accuracy above guessing", ts.Full)
	}
	for i, r := range ts.Runs {
		evoqRun := i < len(fidelityRules)
		if evoqRun && (r.Rule != fidelityRules[i] || r.OK+r.Stopped != s.budget(r.Rule) || r.Stopped == 0) {
			t.Errorf("%s run %+v: want its whole budget evaluated, some stopped", r.Rule, r)
		}
		if !evoqRun && (r.Rule != "optuna tpe, pruner "+train20Pruners[i-len(fidelityRules)] || r.SlotS < ts.Full.SlotS ||
			(strings.HasSuffix(r.Rule, "none") && r.Stopped != 0)) {
			t.Errorf("%s study %+v: want the full run's %v slot-seconds spent, no trial pruned without a pruner", r.Rule, r, ts.Full.SlotS)
		}
		if r.OK == 0 || r.Best <= 0 || r.DesignsAtEqual == 0 || (r.Reached && r.Best < ts.Full.Best) {
			t.Errorf("%s run %+v", r.Rule, r)
		}
	}
	if ts.FullEpochs != s.Budget*s.Epochs || len(ts.Epochs) != len(ts.Runs)+1 {
		t.Errorf("full run trained %d epochs, want %d; %d epoch figures for %d runs and --inherit", ts.FullEpochs,
			s.Budget*s.Epochs, len(ts.Epochs), len(ts.Runs))
	}
	for _, e := range ts.Epochs {
		if e.Epochs <= 0 || e.BestAtEqual <= 0 {
			t.Errorf("in epochs %+v", e)
		}
	}
	in := ts.Inherit
	if in.Scratch.Best != ts.Full.Best || in.Scratch.Mutants != 0 || in.Inherit.Mutants == 0 || in.Inherit.Inherited == 0 {
		t.Errorf("inherit %+v: want scratch the full run, some mutants inherited with --inherit", in)
	}
}
