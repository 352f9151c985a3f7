package driver

import (
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// driverMetricNames are the names of every series the driver serves, a
// histogram's _bucket, _sum and _count included.
func driverMetricNames(t *testing.T) map[string]bool {
	t.Helper()
	names := map[string]bool{}
	descs := make(chan *prometheus.Desc)
	go func() {
		metrics.Describe(descs)
		newVolumeCollector(nil).Describe(descs)
		close(descs)
	}()
	fq := regexp.MustCompile(`fqName: "([^"]+)"`)
	for d := range descs {
		m := fq.FindStringSubmatch(d.String())
		if m == nil {
			t.Fatalf("no name in %s", d)
		}
		names[m[1]] = true
		if m[1] == "csi_rclone_volume_recovery_seconds" {
			for _, s := range []string{"_bucket", "_sum", "_count"} {
				names[m[1]+s] = true
			}
		}
	}
	return names
}

// The Grafana dashboard in deploy/ parses, and queries only series the
// driver serves.
func TestDashboardQueriesExist(t *testing.T) {
	raw, err := os.ReadFile("../../deploy/grafana/csi-rclone.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Title     string `json:"title"`
		UID       string `json:"uid"`
		Templates struct {
			List []struct {
				Name       string `json:"name"`
				Definition string `json:"definition"`
			} `json:"list"`
		} `json:"templating"`
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatalf("the dashboard is not JSON: %v", err)
	}
	if dash.Title == "" || dash.UID == "" || len(dash.Panels) == 0 {
		t.Fatalf("dashboard without title, uid or panels: %+v", dash)
	}
	known := driverMetricNames(t)
	series := regexp.MustCompile(`\bcsi_rclone_[a-z_]+\b`)
	queried := map[string]bool{}
	check := func(where, expr string) {
		found := series.FindAllString(expr, -1)
		if len(found) == 0 {
			t.Errorf("%s: %q queries no csi-rclone series", where, expr)
		}
		for _, name := range found {
			queried[name] = true
			if !known[name] {
				t.Errorf("%s: %q queries %s, which the driver does not serve", where, expr, name)
			}
		}
	}
	for _, p := range dash.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			check("panel "+p.Title, tg.Expr)
		}
	}
	for _, v := range dash.Templates.List {
		if strings.Contains(v.Definition, "label_values") {
			check("variable "+v.Name, v.Definition)
		}
	}
	// Every per-volume series is on the dashboard.
	for name := range known {
		if strings.HasPrefix(name, "csi_rclone_volume_") && !strings.HasPrefix(name, "csi_rclone_volume_recovery") && !queried[name] {
			t.Errorf("the dashboard shows no %s", name)
		}
	}
}
