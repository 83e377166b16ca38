package main

// The metrics the services export, as the binaries describe them
// (--print-metrics), and the check of one PromQL expression against them.

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
)

// metricFamily is one exported metric: its labels and whether it is a histogram
// (then _bucket, _sum and _count series exist, _bucket with `le`).
type metricFamily struct {
	name      string
	labels    map[string]bool
	histogram bool
	anyLabels bool   // a pending metric whose labels are not known yet
	from      string // the binary that exports it
	pending   bool
}

type catalog struct {
	families map[string]*metricFamily
	// values[metric][label]: every value the code gives that label, where the binary lists them.
	values map[string]map[string]map[string]bool
}

// describedFamily is one entry of a binary's `--print-metrics` JSON.
type describedFamily struct {
	Name        string              `json:"name"`
	Type        string              `json:"type"`
	Help        string              `json:"help"`
	Labels      []string            `json:"labels"`
	LabelValues map[string][]string `json:"label_values"`
}

// targetLabels are attached by Prometheus to every scraped series.
var targetLabels = map[string]bool{"job": true, "instance": true}

// loadCatalog reads the metric families the binaries describe: metricsDir holds
// one `<binary>.json` per binary, its `--print-metrics` output.
func loadCatalog(r *reporter, metricsDir, pending string) *catalog {
	c := &catalog{families: map[string]*metricFamily{}, values: map[string]map[string]map[string]bool{}}
	files, _ := filepath.Glob(filepath.Join(metricsDir, "*.json"))
	if len(files) == 0 {
		r.fail("metrics: no --print-metrics output (*.json) in %s", metricsDir)
	}
	for _, f := range files {
		binary := strings.TrimSuffix(filepath.Base(f), ".json")
		raw, err := os.ReadFile(f)
		if err != nil {
			r.fail("metrics: %v", err)
			continue
		}
		var described []describedFamily
		if err := json.Unmarshal(raw, &described); err != nil {
			r.fail("metrics: %s --print-metrics is not the expected JSON: %v", binary, err)
			continue
		}
		if len(described) == 0 {
			r.fail("metrics: %s --print-metrics lists no metric", binary)
		}
		for _, d := range described {
			if d.Name == "" {
				r.fail("metrics: %s --print-metrics lists a metric without a name", binary)
				continue
			}
			fam := c.families[d.Name]
			if fam == nil {
				fam = &metricFamily{name: d.Name, labels: map[string]bool{}, from: binary}
				c.families[d.Name] = fam
			} else {
				fam.from += "," + binary
			}
			for _, l := range d.Labels {
				fam.labels[l] = true
			}
			for label, values := range d.LabelValues {
				if !fam.labels[label] {
					r.fail("metrics: %s --print-metrics lists values of %s{%s}, which has no such label", binary, d.Name, label)
				}
				if c.values[d.Name] == nil {
					c.values[d.Name] = map[string]map[string]bool{}
				}
				if c.values[d.Name][label] == nil {
					c.values[d.Name][label] = map[string]bool{}
				}
				for _, v := range values {
					c.values[d.Name][label][v] = true
				}
			}
			fam.histogram = fam.histogram || d.Type == "histogram"
		}
	}
	var names []string
	for n, f := range c.families {
		desc := n
		if f.histogram {
			desc += "(histogram)"
		}
		names = append(names, desc)
	}
	sort.Strings(names)
	if len(names) > 0 {
		r.ok("metrics: the services export %d metric families: %s", len(names), strings.Join(names, ", "))
	}

	// Pending: metrics another piece of work is adding, named here so rules can be written against them now.
	for _, p := range strings.Fields(pending) {
		name, labelsSpec, _ := strings.Cut(p, ":")
		fam, exists := c.families[name]
		if !exists {
			fam = &metricFamily{name: name, labels: map[string]bool{}, from: "pending", pending: true}
			c.families[name] = fam
		}
		if labelsSpec == "*" {
			fam.anyLabels = true
		}
		var added []string
		for _, l := range strings.Split(labelsSpec, ",") {
			if l != "" && l != "*" && !fam.labels[l] {
				fam.labels[l] = true
				added = append(added, l)
				fam.pending = true
			}
		}
		switch {
		case !exists:
			r.note("metrics: %s is not exported by this tree yet (pending, labels %s)", name, labelsSpec)
		case len(added) > 0 || fam.anyLabels:
			r.note("metrics: %s is exported, its labels %s are pending", name, labelsSpec)
		default:
			r.note("metrics: pending entry %s is exported now, with its labels: remove it from the pending list", p)
		}
	}
	return c
}

// family resolves a series name to its metric family and the extra label it may carry (le on _bucket).
func (c *catalog) family(series string) (*metricFamily, string) {
	if f, ok := c.families[series]; ok {
		return f, ""
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(series, suffix); ok {
			if f, ok := c.families[base]; ok && f.histogram {
				if suffix == "_bucket" {
					return f, "le"
				}
				return f, ""
			}
		}
	}
	return nil, ""
}

var promqlParser = parser.NewParser(parser.Options{})

// checkExpr parses one expression and returns every problem with the series it selects.
func (c *catalog) checkExpr(expr string) (parser.Expr, []string) {
	parsed, err := promqlParser.ParseExpr(expr)
	if err != nil {
		return nil, []string{fmt.Sprintf("does not parse: %v", err)}
	}
	var problems []string
	parser.Inspect(parsed, func(node parser.Node, _ []parser.Node) error {
		vs, ok := node.(*parser.VectorSelector)
		if !ok {
			return nil
		}
		name := vs.Name
		if name == "" {
			for _, m := range vs.LabelMatchers {
				if m.Name == labels.MetricName && m.Type == labels.MatchEqual {
					name = m.Value
				}
			}
		}
		if name == "" {
			problems = append(problems, fmt.Sprintf("selector %s names no metric", vs))
			return nil
		}
		if name == "up" {
			for _, m := range vs.LabelMatchers {
				if m.Name != labels.MetricName && !targetLabels[m.Name] {
					problems = append(problems, fmt.Sprintf("up has no label %q", m.Name))
				}
			}
			return nil
		}
		fam, extra := c.family(name)
		if fam == nil {
			problems = append(problems, fmt.Sprintf("%s is not a metric the services export", name))
			return nil
		}
		for _, m := range vs.LabelMatchers {
			if m.Name == labels.MetricName || targetLabels[m.Name] || m.Name == extra || fam.anyLabels {
				continue
			}
			if !fam.labels[m.Name] {
				has := "none"
				if len(fam.labels) > 0 {
					has = strings.Join(sortedSet(fam.labels), ", ")
				}
				problems = append(problems, fmt.Sprintf("%s has no label %q (its labels: %s)", name, m.Name, has))
				continue
			}
			known := c.values[fam.name][m.Name]
			if known == nil {
				continue
			}
			for _, v := range matcherWords(m) {
				if !known[v] {
					problems = append(problems, fmt.Sprintf("%s{%s}: %q is not a value the code produces", name, m.Name, v))
				}
			}
		}
		return nil
	})
	return parsed, problems
}

var plainAlternation = regexp.MustCompile(`^[a-z0-9_]+(\|[a-z0-9_]+)*$`)

// matcherWords: the literal values of an equality matcher, or of a regex made only of a|b|c alternatives.
func matcherWords(m *labels.Matcher) []string {
	switch m.Type {
	case labels.MatchEqual, labels.MatchNotEqual:
		if m.Value == "" {
			return nil
		}
		return []string{m.Value}
	default:
		if plainAlternation.MatchString(m.Value) {
			return strings.Split(m.Value, "|")
		}
		return nil
	}
}

func sortedSet(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
