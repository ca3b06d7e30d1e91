package report

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"html/template"
	"io"
	"math"
	"strings"
	"time"

	"github.com/evoq/evoq/runstate"
	"github.com/evoq/evoq/schema"
)

// roundDuration rounds seconds to a readable duration.
func roundDuration(s float64) time.Duration {
	d := time.Duration(s * float64(time.Second))
	switch {
	case d >= time.Minute:
		return d.Round(time.Second)
	case d >= time.Second:
		return d.Round(10 * time.Millisecond)
	default:
		return d.Round(100 * time.Microsecond)
	}
}

// page is what the template reads.
type page struct {
	A         *Analysis
	Charts    []pageChart
	Statuses  []pageStatus
	Generated string
	Span      string
	Best      string
	// HostColumns and Hosts are the status breakdown by host.
	HostColumns []schema.Status
	Hosts       []pageHost
	// Objectives, Front and Hypervolume are the front's figures, for a
	// run of several objectives.
	Objectives, Front, Hypervolume string
}

type pageChart struct {
	Chart
	Src template.URL
}

type pageStatus struct {
	Name    string
	Count   int
	Percent string
	Color   template.CSS
}

// WriteHTML writes the report as one self-contained HTML page: the charts
// are embedded as PNG data URLs.
func WriteHTML(w io.Writer, a *Analysis, charts []Chart, generated time.Time) error {
	pg := page{A: a, Generated: generated.UTC().Format(time.RFC3339), Span: seconds(a.spanSeconds), Best: "none yet"}
	if a.Best != nil {
		pg.Best = fmt.Sprintf("%.6g (%s)", *a.Best, a.BestID)
	}
	for _, c := range charts {
		src := "data:image/png;base64," + base64.StdEncoding.EncodeToString(c.PNG)
		pg.Charts = append(pg.Charts, pageChart{Chart: c, Src: template.URL(src)})
	}
	for _, s := range a.statuses() {
		n := a.Counts[s]
		pct := "–"
		if a.Evaluations > 0 {
			pct = fmt.Sprintf("%.1f%%", 100*float64(n)/float64(a.Evaluations))
		}
		c := statusColor(s)
		pg.Statuses = append(pg.Statuses, pageStatus{Name: string(s), Count: n, Percent: pct,
			Color: template.CSS(fmt.Sprintf("#%02x%02x%02x", c.R, c.G, c.B))})
	}
	pg.Objectives, pg.Front, pg.Hypervolume = frontRows(a.Pareto)
	pg.HostColumns = hostStatuses(a.Hosts)
	pg.Hosts = hostRows(a.Hosts, pg.HostColumns)
	var buf bytes.Buffer
	if err := pageTemplate.Execute(&buf, pg); err != nil {
		return fmt.Errorf("report page: %w", err)
	}
	_, err := w.Write(buf.Bytes())
	return err
}

// objectivesText is a run's objectives and constraints for people:
// "f1:min, f2:min subject to f1>=0.05".
func objectivesText(p *runstate.Pareto) string {
	s := strings.Join(p.Objectives, ", ")
	if len(p.Constraints) > 0 {
		s += " subject to " + strings.Join(p.Constraints, ", ")
	}
	return s
}

// frontRows are the facts table's rows of a front; "" for none.
func frontRows(p *runstate.Pareto) (objectives, front, hypervolume string) {
	if p == nil {
		return "", "", ""
	}
	objectives = objectivesText(p)
	front = fmt.Sprintf("%d designs (digest %s)", len(p.Front), p.FrontDigest)
	if p.Unmeasured > 0 {
		front += fmt.Sprintf("; %d ok results lack an objective and are not ranked", p.Unmeasured)
	}
	hypervolume = "not known yet: its reference point comes from the initial designs"
	if p.Hypervolume != nil {
		hypervolume = fmt.Sprintf("%.6g from the reference point %s", *p.Hypervolume, vector(p.HVRef))
		if p.HypervolumeRatio != nil {
			hypervolume += fmt.Sprintf(", %.4g of the true front's", *p.HypervolumeRatio)
		}
	}
	return objectives, front, hypervolume
}

var pageTemplate = template.Must(template.New("report").Funcs(template.FuncMap{
	"pct":  func(f float64) string { return fmt.Sprintf("%.1f%%", 100*f) },
	"rate": func(f float64) string { return fmt.Sprintf("%.3g", f) },
	"fit": func(f float64) string {
		if math.IsNaN(f) {
			return "NaN"
		}
		return fmt.Sprintf("%.6g", f)
	},
	"dur":       func(d time.Duration) string { return roundDuration(d.Seconds()).String() },
	"status":    func(s schema.Status) string { return string(s) },
	"earlystop": DescribeEarlyStop,
}).Parse(`<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>evoq run {{.A.RunID}}</title>
<style>
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; margin: 0 auto; max-width: 1000px; padding: 1.5em; color: #222; }
h1 { font-size: 1.5em; margin-bottom: 0.2em; }
.sub { color: #666; margin-top: 0; }
table { border-collapse: collapse; margin: 0.8em 0; }
th, td { padding: 0.25em 0.7em; text-align: left; border-bottom: 1px solid #ddd; font-size: 0.92em; vertical-align: top; }
th { background: #f4f4f4; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
.facts td:first-child { color: #555; }
figure { margin: 1.5em 0; }
figure img { max-width: 100%; height: auto; border: 1px solid #eee; }
figcaption { color: #555; font-size: 0.9em; margin-top: 0.3em; }
.swatch { display: inline-block; width: 0.9em; height: 0.9em; border-radius: 2px; vertical-align: middle; margin-right: 0.3em; }
.broken { color: #d62728; font-weight: bold; }
.bar { display: flex; width: 12em; height: 0.9em; background: #eee; }
.bar span { display: block; height: 100%; }
code { font-size: 0.9em; }
</style>
</head>
<body data-charts="{{len .Charts}}">
<h1>evoq run <code>{{.A.RunID}}</code></h1>
<p class="sub">phase {{if .A.Phase}}{{.A.Phase}}{{else}}unknown{{end}}{{if .A.Space}} · space {{.A.Space}}{{end}} · report generated {{.Generated}}</p>

<table class="facts">
<tr><td>evaluations</td><td class="num">{{.A.Evaluations}}{{if .A.Budget}} of {{.A.Budget}} budget{{end}}</td></tr>
<tr><td>stored results</td><td class="num">{{.A.Results}} ({{.A.Duplicates}} duplicates counted once{{if .A.Foreign}}, {{.A.Foreign}} foreign not counted{{end}}{{if .A.Malformed}}, {{.A.Malformed}} malformed skipped{{end}})</td></tr>
{{if .Objectives}}<tr><td>objectives</td><td class="num">{{.Objectives}}</td></tr>
<tr><td>front</td><td class="num">{{.Front}}</td></tr>
<tr><td>hypervolume</td><td class="num">{{.Hypervolume}}</td></tr>
{{end}}{{if .A.ObjectivesError}}<tr><td>objectives</td><td class="num broken">not read, drawn as for one fitness: {{.A.ObjectivesError}}</td></tr>
{{end}}<tr><td>best fitness</td><td class="num">{{.Best}}</td></tr>
<tr><td>slots</td><td class="num">{{.A.Slots}} on {{.A.Workers}} workers, {{.A.SlotsUsed}} evaluated a design</td></tr>
<tr><td>utilization</td><td class="num">{{pct .A.Utilization}}</td></tr>
<tr><td>span</td><td class="num">{{.Span}}, {{rate .A.Rate}} evaluations/s</td></tr>
{{if .A.EarlyStop}}<tr><td>early stopping</td><td class="num">{{earlystop .A.EarlyStop}}</td></tr>
{{end}}{{if or .A.Reports .A.MalformedReports}}<tr><td>intermediate reports</td><td class="num">{{.A.Reports}}{{if .A.MalformedReports}} ({{.A.MalformedReports}} malformed skipped){{end}}</td></tr>
{{end}}</table>

<h2>Status breakdown</h2>
<table>
<tr><th>status</th><th>designs</th><th>share</th></tr>
{{range .Statuses}}<tr><td><span class="swatch" style="background: {{.Color}}"></span>{{.Name}}</td><td class="num">{{.Count}}</td><td class="num">{{.Percent}}</td></tr>
{{end}}</table>

{{if .Hosts}}<h3 id="hosts">By host</h3>
<p class="sub">Every result the run stored, counted or not, by the host that evaluated it; the hosts with the largest share of errors and timeouts first.</p>
<table class="hosts">
<tr><th>host</th><th>workers</th><th>GPUs</th>{{range .HostColumns}}<th>{{status .}}</th>{{end}}<th>results</th><th>failed</th><th></th></tr>
{{range .Hosts}}<tr><td><code>{{.Name}}</code></td><td class="num">{{.Workers}}</td><td class="num">{{.GPUs}}</td>{{range .Counts}}<td class="num">{{.}}</td>{{end}}<td class="num">{{.Results}}</td><td class="num">{{.Failed}}</td><td><div class="bar">{{range .Segments}}<span style="{{.Style}}" title="{{.Title}}"></span>{{end}}</div></td></tr>
{{end}}</table>{{end}}

{{range .Charts}}<figure id="{{.Name}}">
<img class="chart" src="{{.Src}}" width="{{.Width}}" height="{{.Height}}" alt="{{.Title}}">
<figcaption>{{.Caption}}</figcaption>
</figure>
{{end}}
<h2>Top designs</h2>
{{if .A.Top}}<table>
<tr><th>#</th><th>design</th><th>fitness</th><th>origin</th><th>genome</th><th>worker/slot</th><th>duration</th></tr>
{{range .A.Top}}<tr><td class="num">{{.Rank}}</td><td><code>{{.ID}}</code></td><td class="num">{{fit .Fitness}}</td><td>{{.Origin}}</td><td><code>{{.Genome}}</code></td><td>{{.Worker}}/{{.Slot}}{{if .GPU}} gpu {{.GPU}}{{end}}</td><td class="num">{{dur .Duration}}</td></tr>
{{end}}</table>{{else}}<p>No design has an ok result yet.</p>{{end}}

<script>
// Flag a chart the browser could not draw, and count the drawn ones in
// data-charts-drawn on the body.
(function () {
  function check() {
    var imgs = document.querySelectorAll("img.chart"), drawn = 0;
    imgs.forEach(function (img) {
      if (img.complete && img.naturalWidth > 0) { drawn++; return; }
      var p = document.createElement("p");
      p.className = "broken";
      p.textContent = "This chart could not be drawn: " + img.alt;
      img.replaceWith(p);
    });
    document.body.dataset.chartsDrawn = String(drawn);
  }
  if (document.readyState === "complete") { check(); } else { window.addEventListener("load", check); }
})();
</script>
</body>
</html>
`))
