package main

// The metrics the services export, read from their Rust sources, and the
// check of one PromQL expression against them.

import (
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
	from      string // where it was found
	pending   bool
}

type catalog struct {
	families map[string]*metricFamily
	// values[metric][label]: the label values the code can produce, where we can read them.
	values map[string]map[string]map[string]bool
}

// Where the services define their metrics. Each metric's name is a string
// literal; its labels are the next `&[...]` after it (the prometheus crate's
// `XxxVec::new(Opts::new("name", "help"), &["label", ...])`).
var metricSources = []string{"gateway/src", "consumer/src", "dlq-replayer/src", "reconciler/src"}

// Where the values of a few labels that alert rules match on come from: every
// snake_case string literal of these files is a possible value (a superset,
// enough to catch a misspelt code).
var labelValueSources = map[string][]string{
	"hookline_gateway_requests_total/outcome":           {"gateway/src/error.rs", "gateway/src/ingest.rs", "common/src/signature/mod.rs"},
	"hookline_gateway_request_duration_seconds/outcome": {"gateway/src/error.rs", "gateway/src/ingest.rs", "common/src/signature/mod.rs"},
	"hookline_gateway_produce_duration_seconds/outcome": {"gateway/src/ingest.rs"},
	"hookline_consumer_events_total/outcome":            {"consumer/src/pipeline.rs"},
}

var (
	nameLiteral  = regexp.MustCompile(`"(hookline_[a-z0-9_]+)"`)
	labelList    = regexp.MustCompile(`&\[([^\]]*)\]`)
	quoted       = regexp.MustCompile(`"([^"]*)"`)
	snakeLiteral = regexp.MustCompile(`"([a-z][a-z0-9_]*)"`)
)

// targetLabels are attached by Prometheus to every scraped series.
var targetLabels = map[string]bool{"job": true, "instance": true}

func loadCatalog(r *reporter, src, pending string) *catalog {
	c := &catalog{families: map[string]*metricFamily{}, values: map[string]map[string]map[string]bool{}}
	for _, dir := range metricSources {
		files, _ := filepath.Glob(filepath.Join(src, dir, "*.rs"))
		if len(files) == 0 {
			r.fail("metrics: no Rust sources in %s", filepath.Join(src, dir))
		}
		for _, f := range files {
			raw, err := os.ReadFile(f)
			if err != nil {
				r.fail("metrics: %v", err)
				continue
			}
			text := stripLineComments(string(raw))
			locs := nameLiteral.FindAllStringSubmatchIndex(text, -1)
			for i, loc := range locs {
				name := text[loc[2]:loc[3]]
				end := len(text)
				if i+1 < len(locs) {
					end = locs[i+1][0]
				}
				// Up to the end of the statement that defines it.
				seg := text[loc[1]:end]
				if j := strings.Index(seg, ")?"); j >= 0 {
					seg = seg[:j+2]
				}
				fam := &metricFamily{name: name, labels: map[string]bool{}, from: relTo(src, f)}
				if m := labelList.FindStringSubmatch(seg); m != nil {
					for _, q := range quoted.FindAllStringSubmatch(m[1], -1) {
						fam.labels[q[1]] = true
					}
				}
				before := text[max(0, loc[0]-40):loc[0]]
				fam.histogram = strings.Contains(before, "HistogramOpts::new(")
				if old, dup := c.families[name]; dup {
					for l := range fam.labels {
						old.labels[l] = true
					}
					old.histogram = old.histogram || fam.histogram
					continue
				}
				c.families[name] = fam
			}
		}
	}
	for key, files := range labelValueSources {
		metric, label, _ := strings.Cut(key, "/")
		vals := map[string]bool{}
		for _, f := range files {
			raw, err := os.ReadFile(filepath.Join(src, f))
			if err != nil {
				r.fail("metrics: label values of %s: %v", key, err)
				continue
			}
			for _, m := range snakeLiteral.FindAllStringSubmatch(string(raw), -1) {
				vals[m[1]] = true
			}
		}
		if c.values[metric] == nil {
			c.values[metric] = map[string]map[string]bool{}
		}
		c.values[metric][label] = vals
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

func stripLineComments(s string) string {
	var b strings.Builder
	for _, line := range strings.Split(s, "\n") {
		if t := strings.TrimSpace(line); strings.HasPrefix(t, "//") {
			b.WriteString("\n")
			continue
		}
		b.WriteString(line)
		b.WriteString("\n")
	}
	return b.String()
}

func relTo(base, p string) string {
	if s, err := filepath.Rel(base, p); err == nil {
		return s
	}
	return p
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
