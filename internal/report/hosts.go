package report

import (
	"fmt"
	"html/template"
	"slices"
	"sort"

	"github.com/evoq/evoq/schema"
)

// Host is one host's part of a run: its results by status. It counts
// every result the run's slots stored there, counted or not: a broken
// node shows in its failed attempts, even where a design's other attempt
// elsewhere is the one that counts.
type Host struct {
	Name    string // "" for the results no worker wrote (lost designs)
	Workers int
	GPUs    int // distinct GPUs that evaluated there, by UUID where known, else by index
	Results int
	Counts  map[schema.Status]int
}

// Failed is the share of the host's results that are errors or timeouts.
func (h Host) Failed() float64 {
	if h.Results == 0 {
		return 0
	}
	return float64(h.Counts[schema.StatusError]+h.Counts[schema.StatusTimeout]) / float64(h.Results)
}

// hostBreakdown sums the run's own results by host, the hosts with the
// largest share of failures first: on 92 nodes the broken one is the
// first row, not somewhere in the alphabet.
func hostBreakdown(own []Entry) []Host {
	type acc struct {
		Host
		workers, gpus map[string]bool
	}
	byName := map[string]*acc{}
	for _, e := range own {
		r := e.Result
		h := byName[r.Host]
		if h == nil {
			h = &acc{Host: Host{Name: r.Host, Counts: map[schema.Status]int{}}, workers: map[string]bool{}, gpus: map[string]bool{}}
			byName[r.Host] = h
		}
		h.Results++
		h.Counts[r.Status]++
		if r.Worker != "" {
			h.workers[r.Worker] = true
		}
		if g := gpuKey(r); g != "" {
			h.gpus[g] = true
		}
	}
	out := make([]Host, 0, len(byName))
	for _, h := range byName {
		h.Workers, h.GPUs = len(h.workers), len(h.gpus)
		out = append(out, h.Host)
	}
	sort.Slice(out, func(i, j int) bool {
		if fi, fj := out[i].Failed(), out[j].Failed(); fi != fj {
			return fi > fj
		}
		return out[i].Name < out[j].Name
	})
	return out
}

// gpuKey names the GPU a result was evaluated on within its host: two
// workers on one host share its GPU indices.
func gpuKey(r *schema.Result) string {
	if r.GPUUUID != "" {
		return r.GPUUUID
	}
	return r.GPU
}

// hostStatuses are the status columns of the host table: the known
// statuses in their usual order, then any other the hosts' results have.
func hostStatuses(hosts []Host) []schema.Status {
	out := append([]schema.Status(nil), statusOrder...)
	var other []schema.Status
	for _, h := range hosts {
		for s := range h.Counts {
			if !slices.Contains(out, s) && !slices.Contains(other, s) {
				other = append(other, s)
			}
		}
	}
	slices.Sort(other)
	return append(out, other...)
}

// pageHost is one row of the host table.
type pageHost struct {
	Name     string
	Workers  int
	GPUs     int
	Results  int
	Counts   []int // by the table's status columns
	Failed   string
	Segments []pageSegment
}

// pageSegment is one status's part of a host's bar.
type pageSegment struct {
	Style template.CSS
	Title string
}

// hostRows lays the hosts out for the page, their counts in the order of
// the columns.
func hostRows(hosts []Host, columns []schema.Status) []pageHost {
	var rows []pageHost
	for _, h := range hosts {
		row := pageHost{Name: h.Name, Workers: h.Workers, GPUs: h.GPUs, Results: h.Results,
			Failed: fmt.Sprintf("%.1f%%", 100*h.Failed())}
		if row.Name == "" {
			row.Name = "none (lost designs)"
		}
		for _, s := range columns {
			n := h.Counts[s]
			row.Counts = append(row.Counts, n)
			if n == 0 || h.Results == 0 {
				continue
			}
			c := statusColor(s)
			row.Segments = append(row.Segments, pageSegment{
				Style: template.CSS(fmt.Sprintf("background: #%02x%02x%02x; width: %.3f%%", c.R, c.G, c.B, 100*float64(n)/float64(h.Results))),
				Title: fmt.Sprintf("%s: %d", s, n)})
		}
		rows = append(rows, row)
	}
	return rows
}
