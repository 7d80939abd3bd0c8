package deploy

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"go.yaml.in/yaml/v3"

	"fairdispatch/internal/natstest"
	"fairdispatch/metrics"
)

const (
	dashboardFile  = "grafana/fairdispatch.json"
	rulesFile      = "prometheus/alerts.yml"
	rulesTestFile  = "prometheus/alerts_test.yml"
	promtoolEnvVar = "FAIRDISPATCH_PROMTOOL"
)

// pendingMetrics are names the files use that another piece of work
// registers (the live policy: docs/operations.md, Live policy). Until it is
// merged they may be missing; once registered they are checked like the rest.
var pendingMetrics = []string{"fairdispatch_policy_refused_total", "fairdispatch_policy_revision"}

// promtool returns the promtool binary. Without one the test fails under
// CI=true (.ci/run installs Debian's prometheus package, which ships it) and
// is skipped otherwise, saying so.
func promtool(t *testing.T) string {
	t.Helper()
	return natstest.Program(t, promtoolEnvVar, "install one (apt-get install prometheus) to check the alert rules", "promtool")
}

func runPromtool(t *testing.T, bin, dir string, args ...string) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	t.Logf("promtool %s:\n%s", strings.Join(args, " "), out)
}

// TestAlertRulesPassPromtool: the rules are valid (promtool check rules) and
// their unit tests pass (promtool test rules).
func TestAlertRulesPassPromtool(t *testing.T) {
	bin := promtool(t)
	runPromtool(t, bin, "prometheus", "check", "rules", filepath.Base(rulesFile))
	runPromtool(t, bin, "prometheus", "test", "rules", filepath.Base(rulesTestFile))
}

// dashboard is the part of the Grafana dashboard these tests read.
type dashboard struct {
	UID    string  `json:"uid"`
	Title  string  `json:"title"`
	Panels []panel `json:"panels"`
}

type panel struct {
	ID         int            `json:"id"`
	Type       string         `json:"type"`
	Title      string         `json:"title"`
	Datasource map[string]any `json:"datasource"`
	GridPos    struct{ W, H int }
	Targets    []struct {
		Expr  string `json:"expr"`
		RefID string `json:"refId"`
	} `json:"targets"`
}

func readDashboard(t *testing.T) dashboard {
	t.Helper()
	b, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	return d
}

// TestDashboardShape: every panel has a unique id, a size, the dashboard's
// data source variable and at least one query; the panels the docs list are
// there.
func TestDashboardShape(t *testing.T) {
	d := readDashboard(t)
	if d.UID == "" || d.Title == "" {
		t.Errorf("the dashboard needs a uid and a title")
	}
	ids := map[int]bool{}
	var titles []string
	for _, p := range d.Panels {
		titles = append(titles, p.Title)
		if ids[p.ID] || p.ID == 0 {
			t.Errorf("panel %q: id %d is zero or taken", p.Title, p.ID)
		}
		ids[p.ID] = true
		if p.GridPos.W == 0 || p.GridPos.H == 0 {
			t.Errorf("panel %q has no size", p.Title)
		}
		if p.Datasource["uid"] != "${datasource}" {
			t.Errorf("panel %q: data source %v, want the ${datasource} variable", p.Title, p.Datasource)
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, q := range p.Targets {
			if q.Expr == "" || q.RefID == "" {
				t.Errorf("panel %q: a query without expr or refId", p.Title)
			}
		}
	}
	for _, want := range []string{"Backlog per class", "Dispatch rate per class", "Queue wait p50 and p99 per class",
		"Dead letters by reason", "Handshakes by outcome", "Live workers", "Live workers (over time)", "Leader", "Load reports dropped and coalesced", "Policy revision"} {
		if !slices.Contains(titles, want) {
			t.Errorf("no panel %q (panels: %q)", want, titles)
		}
	}
}

// grafanaVars replaces the dashboard's variables with values PromQL parses.
var grafanaVars = strings.NewReplacer("$__rate_interval", "5m", "$__interval", "1m", "$class", ".*")

// TestDashboardQueriesParse: every query of the dashboard is valid PromQL,
// checked by promtool as the expression of a recording rule.
func TestDashboardQueriesParse(t *testing.T) {
	bin := promtool(t)
	d := readDashboard(t)
	type rule struct {
		Record string `yaml:"record"`
		Expr   string `yaml:"expr"`
	}
	var rules []rule
	for _, p := range d.Panels {
		for _, q := range p.Targets {
			rules = append(rules, rule{Record: fmt.Sprintf("dashboard:panel_%d_%s", p.ID, strings.ToLower(q.RefID)), Expr: grafanaVars.Replace(q.Expr)})
		}
	}
	b, err := yaml.Marshal(map[string]any{"groups": []any{map[string]any{"name": "dashboard", "rules": rules}}})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "dashboard.yml"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	runPromtool(t, bin, dir, "check", "rules", "dashboard.yml")
}

var metricName = regexp.MustCompile(`\bfairdispatch_[a-zA-Z0-9_]+`)

// registered returns the names of every metric the dispatcher registers, with
// the series names of its histograms (_bucket, _sum, _count).
func registered(t *testing.T) map[string]bool {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	m := metrics.New(reg, []string{"premium", "regular"})
	m.SetWorkers([]metrics.WorkerLoad{{ID: "w1"}})          // the per-worker families appear with a worker
	metrics.NewStorage(reg, []string{"DISPATCH_REQ"}, true) // with an embedded server: every storage gauge
	metrics.RegisterBuildInfo(reg, "v0", "r", "go")
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, mf := range mfs {
		names[mf.GetName()] = true
		if mf.GetType().String() == "HISTOGRAM" {
			for _, s := range []string{"_bucket", "_sum", "_count"} {
				names[mf.GetName()+s] = true
			}
		}
	}
	return names
}

// TestMetricNamesExist: every fairdispatch_ name in the dashboard, the rules
// and their tests is a metric the dispatcher registers (or one the live
// policy work is adding, pendingMetrics): a typo would make a panel empty or
// an alert silent.
func TestMetricNamesExist(t *testing.T) {
	names := registered(t)
	if !names["fairdispatch_dispatched_total"] || !names["fairdispatch_queue_wait_seconds_bucket"] {
		t.Fatalf("registered names look wrong: %v", names)
	}
	used := map[string][]string{}
	for _, f := range []string{dashboardFile, rulesFile, rulesTestFile} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range metricName.FindAllString(string(b), -1) {
			if !slices.Contains(used[n], f) {
				used[n] = append(used[n], f)
			}
		}
	}
	var missing []string
	for n, files := range used {
		if names[n] || slices.Contains(pendingMetrics, n) || isNotAMetric(n) {
			continue
		}
		missing = append(missing, fmt.Sprintf("%s (in %s)", n, strings.Join(files, ", ")))
	}
	sort.Strings(missing)
	for _, m := range missing {
		t.Errorf("not a registered metric: %s", m)
	}
	for _, n := range pendingMetrics {
		if !names[n] {
			t.Logf("%s is not registered yet (the live policy work adds it)", n)
		}
	}
	if len(used) < 10 {
		t.Errorf("found only %d metric names in the files: is the pattern right?", len(used))
	}
}

// isNotAMetric reports names that match the pattern and are not metrics: the
// live policy's KV bucket, named in the rules' text.
func isNotAMetric(n string) bool { return n == "fairdispatch_policy" }
