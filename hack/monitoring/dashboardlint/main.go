// Command dashboardlint checks a Grafana dashboard (JSON) the way grafana/dashboard-linter does,
// for a dashboard shipped in a chart: grafana/dashboard-linter itself is not served by the Go
// module proxy this project reaches, and its current releases depend on AGPL modules.
//
//	dashboardlint [-metrics FILE] DASHBOARD.json...
//
// The dashboard is decoded strictly by the Grafana Foundation SDK (unknown fields and wrong
// types are errors; panel options and Prometheus queries are decoded by their plugin's types)
// and validated by it; then the rules below run. Each problem is one line, `file: where: rule:
// message`; the exit code is 1 when there is any. With -metrics (one metric name per line, as
// exposed: counters with _total, histograms with _bucket/_sum/_count), every metric a query
// selects must be in the file.
//
// Rules (named as dashboard-linter names them):
//   - template-datasource-rule: a variable `datasource` of type datasource, query prometheus;
//   - panel-datasource-rule, target-datasource-rule: panels and queries use ${datasource};
//   - target-promql-rule: every query parses as PromQL (Prometheus' own parser), with the
//     dashboard's variables and Grafana's $__interval, $__rate_interval, $__range replaced;
//   - target-rate-interval-rule: rate(), irate() and increase() windows are $__rate_interval;
//   - target-metrics-rule: every metric a query selects exists (-metrics);
//   - panel-title-description-rule: every panel has a title and a description;
//   - panel-units-rule: every graph, stat, gauge and bar gauge sets a unit;
//   - uid-rule: the dashboard has a uid and a title.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"regexp"
	"strings"

	"github.com/grafana/grafana-foundation-sdk/go/cog/plugins"
	"github.com/grafana/grafana-foundation-sdk/go/common"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
	"github.com/grafana/grafana-foundation-sdk/go/prometheus"
	"github.com/prometheus/prometheus/promql/parser"
)

const datasourceVar = "${datasource}"

var unitPanels = map[string]bool{"timeseries": true, "stat": true, "gauge": true, "bargauge": true}

// Grafana's own variables, replaced by values the PromQL parser accepts where they stand.
var grafanaVars = strings.NewReplacer(
	"$__rate_interval", "5m", "${__rate_interval}", "5m",
	"$__interval", "1m", "${__interval}", "1m",
	"$__range", "1h", "${__range}", "1h",
)

var variableRef = regexp.MustCompile(`\$\{?([A-Za-z_][A-Za-z0-9_]*)(?::[a-z]+)?\}?`)

type linter struct {
	file     string
	metrics  map[string]bool
	problems []string
}

func (l *linter) report(where, rule, format string, args ...any) {
	l.problems = append(l.problems, fmt.Sprintf("%s: %s: %s: %s", l.file, where, rule, fmt.Sprintf(format, args...)))
}

func main() {
	metricsFile := flag.String("metrics", "", "file of the metric names that exist, one per line")
	flag.Parse()
	if flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: dashboardlint [-metrics FILE] DASHBOARD.json...")
		os.Exit(2)
	}
	var metrics map[string]bool
	if *metricsFile != "" {
		var err error
		if metrics, err = readNames(*metricsFile); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
	}
	plugins.RegisterDefaultPlugins()
	failed := false
	for _, file := range flag.Args() {
		l := &linter{file: file, metrics: metrics}
		l.lintFile()
		for _, p := range l.problems {
			fmt.Println(p)
		}
		failed = failed || len(l.problems) > 0
	}
	if failed {
		os.Exit(1)
	}
}

func readNames(path string) (map[string]bool, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	names := map[string]bool{}
	scanner := bufio.NewScanner(f)
	for scanner.Scan() {
		if name := strings.TrimSpace(scanner.Text()); name != "" {
			names[name] = true
		}
	}
	return names, scanner.Err()
}

func (l *linter) lintFile() {
	raw, err := os.ReadFile(l.file)
	if err != nil {
		l.report("file", "read", "%v", err)
		return
	}
	var d dashboard.Dashboard
	// The panels' errors are reported when each panel is decoded below.
	l.schema(d.UnmarshalJSONStrict(raw), "panels[")
	l.schema(d.Validate(), "panels[")
	if d.Uid == nil || *d.Uid == "" || d.Title == nil || *d.Title == "" {
		l.report("dashboard", "uid-rule", "the dashboard needs a uid and a title")
	}
	variables := l.lintTemplating(d.Templating)
	// The SDK (v0.0.22) returns an empty error list as an error from every strict decoding,
	// and a panel whose decoding "failed" so is left out of d.Panels: decode each panel here.
	var top struct {
		Panels []json.RawMessage `json:"panels"`
	}
	if err := json.Unmarshal(raw, &top); err != nil {
		l.report("dashboard", "schema", "%v", err)
		return
	}
	for _, item := range top.Panels {
		var head struct {
			Type   string            `json:"type"`
			Panels []json.RawMessage `json:"panels"`
		}
		if err := json.Unmarshal(item, &head); err != nil {
			l.report("panels", "schema", "%v", err)
			continue
		}
		if head.Type != "row" {
			l.decodePanel(item, variables)
			continue
		}
		for _, sub := range head.Panels {
			l.decodePanel(sub, variables)
		}
	}
}

// decodePanel decodes a panel, and its queries as Prometheus queries (the SDK, for the same
// reason, leaves every query out of Panel.Targets), then lints them.
func (l *linter) decodePanel(raw json.RawMessage, variables map[string]bool) {
	var p dashboard.Panel
	if l.schema(p.UnmarshalJSONStrict(raw)) {
		return
	}
	var head struct {
		Targets []json.RawMessage `json:"targets"`
	}
	_ = json.Unmarshal(raw, &head) // decoded once already
	queries := make([]prometheus.Dataquery, len(head.Targets))
	for i, target := range head.Targets {
		if l.schema(queries[i].UnmarshalJSONStrict(target)) {
			return
		}
	}
	l.lintPanel(p, queries, variables)
}

// schema reports each error of the SDK's decoding or validation (it returns an empty error
// list, not nil, when there is none) and says whether there was one.
func (l *linter) schema(err error, skip ...string) bool {
	if err == nil {
		return false
	}
	found := false
	for _, line := range strings.Split(err.Error(), "\n") {
		if strings.TrimSpace(line) != "" && !(len(skip) > 0 && strings.HasPrefix(line, skip[0])) {
			l.report("dashboard", "schema", "%s", line)
			found = true
		}
	}
	return found
}

// lintTemplating checks the datasource variable and returns every variable's name.
func (l *linter) lintTemplating(t dashboard.DashboardDashboardTemplating) map[string]bool {
	names := map[string]bool{}
	found := false
	for _, v := range t.List {
		names[v.Name] = true
		if v.Name != "datasource" {
			continue
		}
		found = true
		query := ""
		if v.Query != nil && v.Query.String != nil {
			query = *v.Query.String
		}
		if v.Type != dashboard.VariableTypeDatasource || query != "prometheus" {
			l.report("templating", "template-datasource-rule", "variable datasource must be of type datasource with query prometheus (type %q, query %q)", v.Type, query)
		}
	}
	if !found {
		l.report("templating", "template-datasource-rule", "no variable named datasource (a Prometheus data source the viewer picks)")
	}
	return names
}

func usesDatasourceVar(ref *common.DataSourceRef) bool {
	return ref != nil && ref.Uid != nil && *ref.Uid == datasourceVar
}

func (l *linter) lintPanel(p dashboard.Panel, queries []prometheus.Dataquery, variables map[string]bool) {
	title := ""
	if p.Title != nil {
		title = *p.Title
	}
	where := fmt.Sprintf("panel %q", title)
	if title == "" || p.Description == nil || *p.Description == "" {
		l.report(where, "panel-title-description-rule", "every panel needs a title and a description")
	}
	if p.Type == "text" || p.Type == "row" {
		return
	}
	if !usesDatasourceVar(p.Datasource) {
		l.report(where, "panel-datasource-rule", "the panel's datasource must be %s", datasourceVar)
	}
	if unitPanels[p.Type] && (p.FieldConfig == nil || p.FieldConfig.Defaults.Unit == nil || *p.FieldConfig.Defaults.Unit == "") {
		l.report(where, "panel-units-rule", "a %s panel needs fieldConfig.defaults.unit", p.Type)
	}
	if len(queries) == 0 {
		l.report(where, "target-promql-rule", "the panel has no query")
	}
	for i, q := range queries {
		if q.Datasource != nil && !usesDatasourceVar(q.Datasource) {
			l.report(where, "target-datasource-rule", "target %d's datasource must be %s", i, datasourceVar)
		}
		l.lintExpr(fmt.Sprintf("%s target %d", where, i), q.Expr, variables)
	}
}

func (l *linter) lintExpr(where, expr string, variables map[string]bool) {
	text := grafanaVars.Replace(expr)
	for _, m := range variableRef.FindAllStringSubmatch(text, -1) {
		if !variables[m[1]] {
			l.report(where, "target-promql-rule", "the query uses $%s, which the dashboard does not define", m[1])
		}
	}
	text = variableRef.ReplaceAllString(text, "value")
	parsed, err := parser.NewParser(parser.Options{}).ParseExpr(text)
	if err != nil {
		l.report(where, "target-promql-rule", "%v in %q", err, expr)
		return
	}
	parser.Inspect(parsed, func(node parser.Node, path []parser.Node) error {
		switch n := node.(type) {
		case *parser.Call:
			switch n.Func.Name {
			case "rate", "irate", "increase":
				if !strings.Contains(expr, "$__rate_interval") {
					l.report(where, "target-rate-interval-rule", "%s() should use [$__rate_interval]", n.Func.Name)
				}
			}
		case *parser.VectorSelector:
			if l.metrics != nil && n.Name != "" && !l.metrics[n.Name] {
				l.report(where, "target-metrics-rule", "no metric %s exists", n.Name)
			}
		}
		return nil
	})
}
