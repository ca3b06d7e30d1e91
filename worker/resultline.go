package worker

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"

	"github.com/evoq/evoq/schema"
)

// ResultLineExample is what a result line looks like, for the messages
// about a missing one.
const ResultLineExample = `{"fitness": 0.93} or {"infeasible": "reason"}`

// noFitness is what is wrong with an object that has neither fitness nor
// infeasible.
const noFitness = `no "fitness" or "infeasible": want {"fitness": number} or {"infeasible": "reason"}`

// evalLine is the JSON object an external evaluator prints last.
type evalLine struct {
	Fitness    *float64       `json:"fitness"`
	Metrics    map[string]any `json:"metrics"`
	Infeasible *string        `json:"infeasible"`
}

// ParseOutput turns an external evaluator's last stdout line into an
// outcome; anything but a valid object is an error outcome that says
// what is wrong with it and quotes it.
func ParseOutput(line string) Outcome {
	if line == "" {
		return noResultLine(0)
	}
	var e evalLine
	if err := json.Unmarshal([]byte(line), &e); err != nil {
		// Only what JSON cannot carry fails here; explain names it
		// (a fitness that is a string, Python's NaN, 1e400), and an
		// infeasible line still wins over a fitness it cannot read.
		return explain(line, err)
	}
	if e.Infeasible != nil {
		return Infeasible(*e.Infeasible)
	}
	if e.Fitness == nil {
		return badOutput(noFitness, line)
	}
	// encoding/json decodes no NaN or infinity: the fitness is finite.
	return Outcome{Status: schema.StatusOK, Fitness: *e.Fitness, Metrics: e.Metrics}
}

// badOutput is the error outcome of a result line that is not one, why
// being what is wrong with it.
func badOutput(why, line string) Outcome {
	return Outcome{Status: schema.StatusError, Fitness: schema.InfeasibleFitness,
		Error: fmt.Sprintf("evaluator output: %s; last stdout line: %q", why, clip(line, 200))}
}

// noResultLine is the error outcome of an evaluator whose stdout left no
// line for a result: nothing at all, or report lines and nothing after
// them (reports of them).
func noResultLine(reports int) Outcome {
	why := "no output on stdout"
	if reports > 0 {
		why = fmt.Sprintf("it printed only report lines (%d of them) and no result line", reports)
	}
	return Outcome{Status: schema.StatusError, Fitness: schema.InfeasibleFitness,
		Error: fmt.Sprintf("evaluator output: %s; print the result last, on a line of its own, such as %s", why, ResultLineExample)}
}

// lineTooLong is the error outcome of a result line of n bytes, over
// schema.MaxResultLine; line is its beginning.
func lineTooLong(line string, n int) Outcome {
	return Outcome{Status: schema.StatusError, Fitness: schema.InfeasibleFitness,
		Error: fmt.Sprintf("evaluator output: the result line is %d bytes, over the %d-byte limit for one (a result must fit in one message); it begins: %q",
			n, schema.MaxResultLine, clip(line, 200))}
}

// explain is the outcome of a line that encoding/json refused as a result
// (err): an error naming what is wrong, or, for a line that says the
// design is infeasible, that.
func explain(line string, err error) Outcome {
	v, derr := decodeLoose(line)
	if derr != nil {
		return badOutput(syntaxProblem(line, derr), line)
	}
	m, ok := v.(map[string]any)
	if !ok {
		return badOutput("not a JSON object but "+jsonKind(v), line)
	}
	if r, ok := m["infeasible"]; ok && r != nil {
		reason, ok := r.(string)
		if !ok {
			return badOutput(fmt.Sprintf("infeasible is %s, want a string (the reason)", jsonKind(r)), line)
		}
		return Infeasible(reason)
	}
	if why := fitnessProblem(m["fitness"]); why != "" {
		return badOutput(why, line)
	}
	if why := metricsProblem(m["metrics"]); why != "" {
		return badOutput(why, line)
	}
	// A key evoq does not read, holding what JSON cannot carry.
	if why := valueProblem("", m); why != "" {
		return badOutput(why, line)
	}
	return badOutput("not a result object ("+err.Error()+")", line)
}

// Python's json.dumps writes float('nan') and float('inf') as these bare
// tokens, which JSON has no room for; decodeLoose reads each as a string
// of its own, nonFinite followed by the token, so that the message can
// name the value.
const nonFinite = "\x00evoq-non-finite:"

var nonFiniteTokens = []string{"-Infinity", "Infinity", "NaN"}

// decodeLoose decodes line as JSON, numbers as json.Number and the bare
// tokens NaN, Infinity and -Infinity as nonFinite strings.
func decodeLoose(line string) (any, error) {
	dec := json.NewDecoder(strings.NewReader(markNonFinite(line)))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("more after the JSON value")
	}
	return v, nil
}

// markNonFinite quotes the bare tokens NaN, Infinity and -Infinity outside
// JSON strings as nonFinite strings.
func markNonFinite(line string) string {
	var b strings.Builder
	inString, escaped := false, false
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case inString:
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
		case c == '"':
			inString = true
		default:
			if tok := nonFiniteAt(line, i); tok != "" {
				b.WriteString(`"\u0000` + nonFinite[1:] + tok + `"`)
				i += len(tok) - 1
				continue
			}
		}
		b.WriteByte(c)
	}
	return b.String()
}

// nonFiniteAt is the non-finite token that starts at line[i], or "".
func nonFiniteAt(line string, i int) string {
	for _, tok := range nonFiniteTokens {
		if strings.HasPrefix(line[i:], tok) {
			return tok
		}
	}
	return ""
}

// syntaxProblem says why line is not JSON at all, err being the decoder's
// complaint.
func syntaxProblem(line string, err error) string {
	t := strings.TrimSpace(line)
	switch {
	case strings.Contains(err.Error(), "exceeded max depth"):
		return "nested too deeply to decode (more than 10000 levels of objects and arrays)"
	case !strings.HasPrefix(t, "{") && !strings.HasPrefix(t, "["):
		return "not a JSON object"
	case strings.HasPrefix(t, "{'"):
		// Python's print(dict) and str(dict).
		return "not JSON: single quotes, as Python's print of a dict writes them; print json.dumps(result) instead"
	}
	return "not valid JSON (" + err.Error() + ")"
}

// fitnessProblem says what is wrong with a fitness as decodeLoose gives
// it, or "" when it is a finite number.
func fitnessProblem(f any) string {
	switch x := f.(type) {
	case nil:
		return noFitness
	case json.Number:
		if !finiteNumber(x) {
			return fmt.Sprintf("fitness %s is out of range for a 64-bit float: not finite", x)
		}
		return ""
	case string:
		if tok, ok := strings.CutPrefix(x, nonFinite); ok {
			return fmt.Sprintf("fitness is %s, not a finite number (JSON has no %s: Python's json.dumps writes it for a float that is nan or inf); "+
				`a design that cannot be scored is {"infeasible": "reason"}`, tok, tok)
		}
		return fmt.Sprintf("fitness is a string (%q), want a number", clip(x, 40))
	}
	return fmt.Sprintf("fitness is %s, want a number", jsonKind(f))
}

// metricsProblem says what in metrics, as decodeLoose gives them, cannot be
// stored, or "" when nothing.
func metricsProblem(m any) string {
	switch m.(type) {
	case nil:
		return ""
	case map[string]any:
		return valueProblem("metrics", m)
	}
	return fmt.Sprintf("metrics is %s, want an object", jsonKind(m))
}

// valueProblem names the first value under path ("" for the whole line),
// in key order, that is not a finite number where it is a number.
func valueProblem(path string, v any) string {
	switch x := v.(type) {
	case json.Number:
		if !finiteNumber(x) {
			return fmt.Sprintf("%s %s is out of range for a 64-bit float: not finite", path, x)
		}
	case string:
		if tok, ok := strings.CutPrefix(x, nonFinite); ok {
			return fmt.Sprintf("%s is %s, which JSON cannot carry (Python's json.dumps writes it for a float that is nan or inf); "+
				"give a finite number, or null", path, tok)
		}
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			p := k
			if path != "" {
				p = path + "." + k
			}
			if why := valueProblem(p, x[k]); why != "" {
				return why
			}
		}
	case []any:
		for i, e := range x {
			if why := valueProblem(fmt.Sprintf("%s[%d]", path, i), e); why != "" {
				return why
			}
		}
	}
	return ""
}

func finiteNumber(n json.Number) bool {
	f, err := strconv.ParseFloat(string(n), 64)
	return err == nil && !math.IsInf(f, 0) && !math.IsNaN(f)
}

// jsonKind names the JSON type of a value decodeLoose gives.
func jsonKind(v any) string {
	switch x := v.(type) {
	case nil:
		return "null"
	case bool:
		return "a boolean"
	case json.Number:
		return "a number"
	case string:
		if strings.HasPrefix(x, nonFinite) {
			return strings.TrimPrefix(x, nonFinite)
		}
		return "a string"
	case []any:
		return "an array"
	case map[string]any:
		return "an object"
	}
	return fmt.Sprintf("%T", v)
}
