package runstate

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/evoq/evoq/schema"
)

// stored is one message of a results stream for the fail-fast tests: a
// result of design seq with a status and error text, or a malformed or
// foreign one.
type stored struct {
	seq    uint64
	status schema.Status
	text   string
	kind   string // "", "malformed" or "foreign"
}

func failed(seq uint64, text string) stored {
	return stored{seq: seq, status: schema.StatusError, text: text}
}

func worked(seq uint64) stored { return stored{seq: seq, status: schema.StatusOK} }

// failures are n error results of designs first..first+n-1, all with text.
func failures(first uint64, n int, text string) []stored {
	out := make([]stored, n)
	for i := range out {
		out[i] = failed(first+uint64(i), text)
	}
	return out
}

func (s stored) result(run string) (*schema.Result, error) {
	switch s.kind {
	case "malformed":
		return nil, fmt.Errorf("%w: garbage", schema.ErrMalformed)
	case "foreign":
		run = "other"
	}
	d := schema.Design{V: schema.Version, Run: run, ID: schema.DesignID(run, s.seq), Seq: s.seq, Origin: schema.OriginRandom}
	return &schema.Result{V: schema.Version, Run: run, DesignID: d.ID, Design: d, Status: s.status, Error: s.text}, nil
}

// judgeStream runs the check over a stream as the controller does, the
// counting rule first, from stream sequence 1; it returns the failure and
// the check.
func judgeStream(n, budget int, from uint64, stream []stored) (*schema.Failure, *FailFast) {
	tally := NewTally("r", budget, Rules{})
	check := NewFailFast(n, from)
	var out *schema.Failure
	for i, s := range stream {
		r, err := s.result("r")
		v := tally.Judge(r, err)
		if f := check.Observe(uint64(i+1), r, v, tally.Counted() >= budget); f != nil {
			if out != nil {
				panic("the check failed the run twice")
			}
			out = f
		}
	}
	return out, check
}

const notFound = "evaluator exit status 127; stderr tail: sh: 1: nonexistent-prog: not found"

func TestFailFast(t *testing.T) {
	t.Parallel()
	cat := func(parts ...[]stored) []stored {
		var out []stored
		for _, p := range parts {
			out = append(out, p...)
		}
		return out
	}
	tests := []struct {
		name   string
		n      int
		budget int
		from   uint64
		stream []stored
		want   *schema.Failure // nil: the run does not fail
	}{
		{"the first n fail", 10, 500, 0, failures(1, 12, notFound),
			&schema.Failure{Attempts: 10, StreamSeq: 10, Error: notFound, Count: 10}},
		{"fewer than n fail", 10, 500, 0, failures(1, 9, notFound), nil},
		{"an ok among the first n", 10, 500, 0, cat(failures(1, 9, notFound), []stored{worked(10)}, failures(11, 30, notFound)), nil},
		{"an infeasible one is the evaluator's verdict", 10, 500, 0,
			cat(failures(1, 3, notFound), []stored{{seq: 4, status: schema.StatusInfeasible, text: "too big"}}, failures(5, 30, notFound)), nil},
		{"timeouts are failures", 3, 500, 0, []stored{failed(1, "x"), {seq: 2, status: schema.StatusTimeout, text: "timed out after 1s"},
			{seq: 3, status: schema.StatusTimeout, text: "timed out after 1s"}},
			&schema.Failure{Attempts: 3, StreamSeq: 3, Error: "timed out after 1s", Count: 2}},
		{"malformed and foreign results are no attempts; a lost one fails", 3, 500, 0, []stored{failed(1, "x"), {kind: "malformed"},
			{seq: 2, kind: "foreign", status: schema.StatusOK}, {seq: 900, status: schema.StatusOK}, {seq: 2, status: schema.StatusLost, text: "redelivery limit 3 reached"},
			failed(3, "x"), failed(4, "x")},
			&schema.Failure{Attempts: 3, StreamSeq: 6, Error: "x", Count: 2}},
		{"a second attempt of a design is an attempt", 3, 500, 0, []stored{failed(1, "x"), failed(1, "x"), failed(2, "x")},
			&schema.Failure{Attempts: 3, StreamSeq: 3, Error: "x", Count: 3}},
		{"a duplicate that works ends the check", 3, 500, 0, []stored{failed(1, "x"), worked(1), failed(2, "x"), failed(3, "x")}, nil},
		{"the window starts after from", 3, 500, 4, cat([]stored{worked(1), failed(2, "old"), failed(3, "old"), failed(4, "old")},
			[]stored{failed(5, "new"), failed(6, "new"), failed(7, "new")}),
			&schema.Failure{Attempts: 3, StreamSeq: 7, Error: "new", Count: 3}},
		{"the budget ends before n", 10, 4, 0, failures(1, 4, notFound),
			&schema.Failure{Attempts: 4, StreamSeq: 4, Error: notFound, Count: 4}},
		{"a budget of lost designs fails", 10, 2, 0, []stored{{seq: 1, status: schema.StatusLost, text: "redelivery limit 3 reached"},
			{seq: 2, status: schema.StatusLost, text: "redelivery limit 3 reached"}},
			&schema.Failure{Attempts: 2, StreamSeq: 2, Error: "redelivery limit 3 reached", Count: 2}},
		{"lost results fail like errors", 3, 500, 0, []stored{{seq: 1, status: schema.StatusLost, text: "redelivery limit 3 reached"},
			failed(2, "x"), {seq: 3, status: schema.StatusLost, text: "redelivery limit 3 reached"}},
			&schema.Failure{Attempts: 3, StreamSeq: 3, Error: "redelivery limit 3 reached", Count: 2}},
		{"off", 0, 500, 0, failures(1, 50, notFound), nil},
		{"the most common text", 5, 500, 0, []stored{failed(1, "a"), failed(2, "b"), failed(3, "b"), failed(4, "a"), failed(5, "b")},
			&schema.Failure{Attempts: 5, StreamSeq: 5, Error: "b", Count: 3}},
		{"a tie goes to the text seen first", 4, 500, 0, []stored{failed(1, "a"), failed(2, "b"), failed(3, "b"), failed(4, "a")},
			&schema.Failure{Attempts: 4, StreamSeq: 4, Error: "a", Count: 2}},
		{"no error text", 2, 500, 0, []stored{failed(1, ""), failed(2, "")},
			&schema.Failure{Attempts: 2, StreamSeq: 2, Error: "no error text (status error)", Count: 2}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, _ := judgeStream(tt.n, tt.budget, tt.from, tt.stream)
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("failure %+v, want %+v", got, tt.want)
			}
		})
	}
}

// The verdict is a function of the stream's prefix: a controller that
// restarts after any result, and replays the prefix from the start,
// reaches the same verdict at the same result as one that never stopped.
func TestFailFastPrefix(t *testing.T) {
	t.Parallel()
	stream := []stored{failed(1, "a"), {kind: "malformed"}, failed(2, "b"), failed(2, "b"), {seq: 3, status: schema.StatusLost},
		failed(4, "b"), {seq: 5, kind: "foreign"}, failed(5, "a"), failed(6, "b"), failed(7, "b")}
	whole, _ := judgeStream(5, 100, 0, stream)
	if whole == nil || whole.StreamSeq != 6 {
		t.Fatalf("whole stream: %+v; want a failure at stream sequence 6", whole)
	}
	for k := range len(stream) + 1 {
		got, check := judgeStream(5, 100, 0, stream[:k])
		switch {
		case k < 6 && got != nil:
			t.Errorf("prefix of %d: failed %+v before the whole stream did", k, got)
		case k >= 6 && !reflect.DeepEqual(got, whole):
			t.Errorf("prefix of %d: %+v, want %+v", k, got, whole)
		}
		if seen, of, done := check.Pending(); k < 6 && (done || of != 5 || seen > 5) {
			t.Errorf("prefix of %d: pending %d of %d, done %v", k, seen, of, done)
		}
	}
}

func TestErrorGist(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("é", 400) + " the end"
	tests := []struct{ name, in, want string }{
		{"one line", "  " + notFound + "\n", notFound},
		{"a traceback", "evaluator exit status 1; stderr tail: Traceback (most recent call last):\n  File \"train.py\", line 3, in <module>\n\n" +
			"RuntimeError: CUDA error: uncorrectable ECC error encountered\n",
			"evaluator exit status 1; stderr tail: Traceback (most recent call last): … RuntimeError: CUDA error: uncorrectable ECC error encountered"},
		{"empty", " \n ", ""},
	}
	for _, tt := range tests {
		if got := ErrorGist(tt.in); got != tt.want {
			t.Errorf("%s: ErrorGist = %q, want %q", tt.name, got, tt.want)
		}
	}
	got := ErrorGist(long)
	if n := utf8.RuneCountInString(got); n != FailureErrorMax || !utf8.ValidString(got) ||
		!strings.HasPrefix(got, "éé") || !strings.HasSuffix(got, " the end") || !strings.Contains(got, " … ") {
		t.Errorf("a long text clipped to %d characters: %q; want %d, both ends kept", n, got, FailureErrorMax)
	}
}

// MakeUp counts the designs whose counted result is a failure stored in
// its window: not a duplicate, not a design that worked, not one stored
// before the failed window or after the continuation.
func TestMakeUp(t *testing.T) {
	t.Parallel()
	stream := []stored{
		failed(1, "before the window"), // stream seq 1: before From
		failed(2, "x"), failed(2, "x"), // a duplicate counts once
		{seq: 3, status: schema.StatusTimeout}, worked(4), {seq: 5, status: schema.StatusLost}, {kind: "malformed"},
		{seq: 6, kind: "foreign", status: schema.StatusError},
		failed(7, "x"), // stream seq 9: the last before the continuation
		failed(8, "x"), // stream seq 10: after it
	}
	tally := NewTally("r", 100, Rules{})
	m := &MakeUp{From: 1, To: 9}
	for i, s := range stream {
		r, err := s.result("r")
		m.Add(uint64(i+1), r, tally.Judge(r, err))
	}
	if m.Designs() != 3 {
		t.Errorf("made up for %d designs; want 3 (2, 3 and 7)", m.Designs())
	}
}
