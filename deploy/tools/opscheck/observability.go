package main

// Alert rules, their unit tests, the runbook anchors they link to, and the
// Grafana dashboards.

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"go.yaml.in/yaml/v4"
)

const (
	rulesFile     = "deploy/prometheus/alerts.yml"
	ruleTestsFile = "deploy/prometheus/alerts.test.yml"
	dashboardsDir = "deploy/grafana/dashboards"
	runbookFile   = "docs/runbook.md"
)

var (
	runbookLink = regexp.MustCompile(`^docs/runbook\.md#([a-z0-9-]+)$`)
	severities  = map[string]bool{"critical": true, "warning": true}
)

type ruleFile struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []struct {
			Alert       string            `yaml:"alert"`
			Record      string            `yaml:"record"`
			Expr        string            `yaml:"expr"`
			For         string            `yaml:"for"`
			Labels      map[string]string `yaml:"labels"`
			Annotations map[string]string `yaml:"annotations"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

type ruleTestFile struct {
	RuleFiles []string `yaml:"rule_files"`
	Tests     []struct {
		Name          string `yaml:"name"`
		AlertRuleTest []struct {
			Alertname string           `yaml:"alertname"`
			ExpAlerts []map[string]any `yaml:"exp_alerts"`
		} `yaml:"alert_rule_test"`
	} `yaml:"tests"`
}

func checkObservability(r *reporter, root, metricsDir, pending, emit string) {
	c := loadCatalog(r, metricsDir, pending)
	anchors := checkRules(r, root, c)
	checkRunbook(r, root, anchors)
	checkDashboards(r, root, c, emit)
}

func readYAML(r *reporter, path string, into any) bool {
	raw, err := os.ReadFile(path)
	if err != nil {
		r.fail("%v", err)
		return false
	}
	if err := yaml.Unmarshal(raw, into); err != nil {
		r.fail("%s is not valid YAML: %v", path, err)
		return false
	}
	return true
}

// checkRules returns the runbook anchors the alerts link to (anchor -> alerts).
func checkRules(r *reporter, root string, c *catalog) map[string][]string {
	anchors := map[string][]string{}
	var rules ruleFile
	if !readYAML(r, filepath.Join(root, rulesFile), &rules) {
		return anchors
	}
	alerts := map[string]bool{}
	var names []string
	for _, g := range rules.Groups {
		for _, rule := range g.Rules {
			name := rule.Alert
			if name == "" {
				name = rule.Record
			}
			before := r.fails
			if _, problems := c.checkExpr(rule.Expr); len(problems) > 0 {
				for _, p := range problems {
					r.fail("%s: %s: expr: %s", rulesFile, name, p)
				}
			}
			if rule.Alert == "" {
				continue
			}
			if alerts[rule.Alert] {
				r.fail("%s: alert %s is defined twice", rulesFile, rule.Alert)
			}
			alerts[rule.Alert] = true
			if !severities[rule.Labels["severity"]] {
				r.fail("%s: %s: labels.severity is %q, want critical or warning", rulesFile, rule.Alert, rule.Labels["severity"])
			}
			for _, a := range []string{"summary", "description"} {
				if strings.TrimSpace(rule.Annotations[a]) == "" {
					r.fail("%s: %s: no %s annotation", rulesFile, rule.Alert, a)
				}
			}
			m := runbookLink.FindStringSubmatch(rule.Annotations["runbook_url"])
			if m == nil {
				r.fail("%s: %s: runbook_url %q is not docs/runbook.md#<anchor>", rulesFile, rule.Alert, rule.Annotations["runbook_url"])
			} else {
				anchors[m[1]] = append(anchors[m[1]], rule.Alert)
			}
			if r.fails == before {
				names = append(names, rule.Alert)
			}
		}
	}
	if len(alerts) == 0 {
		r.fail("%s: no alerts", rulesFile)
	}
	if len(names) > 0 {
		r.ok("%s: %d alerts parse, name only exported metrics and labels, and carry severity, summary, description and runbook_url: %s",
			rulesFile, len(names), strings.Join(names, ", "))
	}

	var tests ruleTestFile
	if !readYAML(r, filepath.Join(root, ruleTestsFile), &tests) {
		return anchors
	}
	fired := map[string]int{}
	for _, t := range tests.Tests {
		for _, a := range t.AlertRuleTest {
			if !alerts[a.Alertname] {
				r.fail("%s: test %q checks alert %s, which %s does not define", ruleTestsFile, t.Name, a.Alertname, rulesFile)
			}
			if len(a.ExpAlerts) > 0 {
				fired[a.Alertname]++
			}
		}
	}
	var never []string
	for a := range alerts {
		if fired[a] == 0 {
			never = append(never, a)
		}
	}
	sort.Strings(never)
	if len(never) > 0 {
		r.fail("%s: these alerts fire in no unit test: %s", ruleTestsFile, strings.Join(never, ", "))
	} else if len(alerts) > 0 {
		r.ok("%s: every alert fires in at least one unit test (%d tests)", ruleTestsFile, len(tests.Tests))
	}
	return anchors
}

// checkRunbook: once docs/runbook.md exists, every anchor the alerts link to is a heading (GitHub's slug) or an
// explicit <a id/name> in it. Until then, says which anchors it needs.
func checkRunbook(r *reporter, root string, anchors map[string][]string) {
	keys := make([]string, 0, len(anchors))
	for k := range anchors {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	f, err := os.Open(filepath.Join(root, runbookFile))
	if err != nil {
		r.note("%s does not exist yet; the alerts link to these anchors in it: %s", runbookFile, strings.Join(keys, ", "))
		return
	}
	defer f.Close()
	have := map[string]bool{}
	explicit := regexp.MustCompile(`<a\s+(?:id|name)="([^"]+)"`)
	sc := bufio.NewScanner(f)
	inFence := false
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			inFence = !inFence
			continue
		}
		for _, m := range explicit.FindAllStringSubmatch(line, -1) {
			have[m[1]] = true
		}
		if !inFence && strings.HasPrefix(line, "#") {
			have[slug(strings.TrimLeft(line, "#"))] = true
		}
	}
	var missing []string
	for _, k := range keys {
		if !have[k] {
			missing = append(missing, fmt.Sprintf("#%s (%s)", k, strings.Join(anchors[k], ", ")))
		}
	}
	if len(missing) > 0 {
		r.fail("%s has no section for: %s", runbookFile, strings.Join(missing, "; "))
		return
	}
	r.ok("%s has a section for every alert's runbook_url: %s", runbookFile, strings.Join(keys, ", "))
}

// slug is GitHub's heading anchor: lower case, punctuation dropped, spaces to hyphens.
func slug(heading string) string {
	var b strings.Builder
	for _, ch := range strings.ToLower(strings.TrimSpace(heading)) {
		switch {
		case ch >= 'a' && ch <= 'z', ch >= '0' && ch <= '9', ch == '-', ch == '_':
			b.WriteRune(ch)
		case ch == ' ':
			b.WriteRune('-')
		}
	}
	return b.String()
}

// ------------------------------------------------------------------ dashboards

var (
	grafanaInterval = regexp.MustCompile(`\$\{?__(rate_interval|interval|range)\}?`)
	grafanaVar      = regexp.MustCompile(`\$\{([A-Za-z0-9_]+)(?::[a-z]+)?\}|\$([A-Za-z_][A-Za-z0-9_]*)`)
	labelValuesCall = regexp.MustCompile(`^\s*label_values\(\s*(.*?)\s*,\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\)\s*$`)
)

type gridPos struct{ X, Y, W, H int }

func checkDashboards(r *reporter, root string, c *catalog, emit string) {
	files, _ := filepath.Glob(filepath.Join(root, dashboardsDir, "*.json"))
	if len(files) == 0 {
		r.fail("no dashboards in %s", dashboardsDir)
		return
	}
	type recording struct{ record, expr string }
	var emitted []recording
	for _, file := range files {
		name := filepath.Join(dashboardsDir, filepath.Base(file))
		raw, err := os.ReadFile(file)
		if err != nil {
			r.fail("%v", err)
			continue
		}
		var dash map[string]any
		if err := json.Unmarshal(raw, &dash); err != nil {
			r.fail("%s is not valid JSON: %v", name, err)
			continue
		}
		before := r.fails
		for _, k := range []string{"uid", "title"} {
			if s, _ := dash[k].(string); s == "" {
				r.fail("%s: no %s", name, k)
			}
		}
		vars := map[string]bool{}
		dsVars := map[string]bool{}
		templ, _ := dash["templating"].(map[string]any)
		list, _ := templ["list"].([]any)
		for _, v := range list {
			v, _ := v.(map[string]any)
			vname, _ := v["name"].(string)
			vars[vname] = true
			if v["type"] == "datasource" {
				if v["query"] != "prometheus" {
					r.fail("%s: datasource variable %s is not of type prometheus", name, vname)
				}
				dsVars[vname] = true
			}
			if v["type"] == "query" {
				q := v["query"]
				if qm, ok := q.(map[string]any); ok {
					q = qm["query"]
				}
				qs, _ := q.(string)
				m := labelValuesCall.FindStringSubmatch(qs)
				if m == nil {
					r.fail("%s: variable %s: query %q is not label_values(<selector>, <label>)", name, vname, qs)
					continue
				}
				_, problems := c.checkExpr(m[1])
				for _, p := range problems {
					r.fail("%s: variable %s: %s", name, vname, p)
				}
				if fam, _ := c.family(strings.TrimSpace(strings.SplitN(m[1], "{", 2)[0])); fam != nil && !fam.labels[m[2]] && !fam.anyLabels {
					r.fail("%s: variable %s: %s has no label %q", name, vname, fam.name, m[2])
				}
			}
		}
		checkDatasource := func(where string, ds any) {
			d, _ := ds.(map[string]any)
			uid, _ := d["uid"].(string)
			if m := grafanaVar.FindStringSubmatch(uid); m != nil && dsVars[m[1]+m[2]] {
				return
			}
			r.fail("%s: %s: datasource %v is not the dashboard's datasource variable", name, where, ds)
		}

		ids := map[float64]string{}
		var boxes []struct {
			title string
			pos   gridPos
		}
		nExprs := 0
		var walk func(panels []any)
		walk = func(panels []any) {
			for _, p := range panels {
				p, _ := p.(map[string]any)
				title, _ := p["title"].(string)
				id, _ := p["id"].(float64)
				if other, dup := ids[id]; dup {
					r.fail("%s: panels %q and %q share id %v", name, other, title, id)
				}
				ids[id] = title
				if title == "" {
					r.fail("%s: panel %v has no title", name, id)
				}
				if gp, ok := p["gridPos"].(map[string]any); ok {
					g := gridPos{X: toInt(gp["x"]), Y: toInt(gp["y"]), W: toInt(gp["w"]), H: toInt(gp["h"])}
					if g.W <= 0 || g.H <= 0 || g.X < 0 || g.X+g.W > 24 {
						r.fail("%s: panel %q: gridPos %+v is outside the 24-column grid", name, title, g)
					}
					for _, b := range boxes {
						if g.X < b.pos.X+b.pos.W && b.pos.X < g.X+g.W && g.Y < b.pos.Y+b.pos.H && b.pos.Y < g.Y+g.H {
							r.fail("%s: panels %q and %q overlap", name, b.title, title)
						}
					}
					boxes = append(boxes, struct {
						title string
						pos   gridPos
					}{title, g})
				} else {
					r.fail("%s: panel %q has no gridPos", name, title)
				}
				if p["type"] != "row" {
					checkDatasource(fmt.Sprintf("panel %q", title), p["datasource"])
					targets, _ := p["targets"].([]any)
					if len(targets) == 0 {
						r.fail("%s: panel %q has no query", name, title)
					}
					for _, t := range targets {
						t, _ := t.(map[string]any)
						ref, _ := t["refId"].(string)
						expr, _ := t["expr"].(string)
						where := fmt.Sprintf("panel %q query %s", title, ref)
						checkDatasource(where, t["datasource"])
						if strings.TrimSpace(expr) == "" {
							r.fail("%s: %s: empty expr", name, where)
							continue
						}
						concrete := grafanaInterval.ReplaceAllString(expr, "5m")
						for _, m := range grafanaVar.FindAllStringSubmatch(concrete, -1) {
							if v := m[1] + m[2]; !vars[v] {
								r.fail("%s: %s: uses $%s, which the dashboard does not define", name, where, v)
							}
						}
						concrete = grafanaVar.ReplaceAllString(concrete, ".*")
						nExprs++
						if _, problems := c.checkExpr(concrete); len(problems) > 0 {
							for _, pr := range problems {
								r.fail("%s: %s: %s", name, where, pr)
							}
							continue
						}
						emitted = append(emitted, recording{
							record: fmt.Sprintf("dashboard:%s:panel_%d_%s", recordPart(dash["uid"]), int(id), strings.ToLower(ref)),
							expr:   concrete,
						})
					}
				}
				if sub, ok := p["panels"].([]any); ok {
					walk(sub)
				}
			}
		}
		panels, _ := dash["panels"].([]any)
		walk(panels)
		if r.fails == before {
			r.ok("%s: valid JSON, %d panels on the datasource variable, no overlaps, %d expressions parse and name only exported metrics and labels",
				name, len(ids), nExprs)
		}
	}
	if emit != "" {
		var b strings.Builder
		b.WriteString("# Generated by opscheck from the dashboards, for `promtool check rules`.\ngroups:\n  - name: dashboards\n    rules:\n")
		for _, e := range emitted {
			expr, _ := json.Marshal(e.expr)
			fmt.Fprintf(&b, "      - record: %s\n        expr: %s\n", e.record, expr)
		}
		if err := os.WriteFile(emit, []byte(b.String()), 0o644); err != nil {
			r.fail("write %s: %v", emit, err)
		}
	}
}

func toInt(v any) int {
	f, _ := v.(float64)
	return int(f)
}

func recordPart(v any) string {
	s, _ := v.(string)
	return regexp.MustCompile(`[^a-zA-Z0-9_]`).ReplaceAllString(s, "_")
}
