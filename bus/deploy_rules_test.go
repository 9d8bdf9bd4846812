package bus_test

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/ovbus/ovbus/bus"
)

// serveMetrics are the metrics `ovbus serve` registers beside the bus's; e2e checks the rules'
// names against a running ovbus serve.
var serveMetrics = []string{"ovbus_config_files_broken"}

// Every ovbus_ metric (and every reason label) named by the alert rules in deploy/ exists.
func TestDeployAlertRulesNameRealMetrics(t *testing.T) {
	s, err := bus.New(bus.Options{Addr: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	families, err := s.Metrics().Gather()
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	for _, m := range serveMetrics {
		have[m] = true
	}
	reasons := map[string]bool{}
	for _, f := range families {
		name := f.GetName()
		have[name] = true
		if f.GetType().String() == "HISTOGRAM" {
			have[name+"_bucket"], have[name+"_sum"], have[name+"_count"] = true, true, true
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "reason" {
					reasons[name+"/"+l.GetValue()] = true
				}
			}
		}
	}
	rules, err := os.ReadFile("../deploy/prometheus/ovbus-rules.yml")
	if err != nil {
		t.Fatal(err)
	}
	seen := 0
	for _, line := range strings.Split(string(rules), "\n") {
		if !strings.Contains(line, "expr:") {
			continue
		}
		for _, m := range regexp.MustCompile(`(ovbus_\w+)(\{reason=~?"([^"]+)"\})?`).FindAllStringSubmatch(line, -1) {
			seen++
			if !have[m[1]] {
				t.Errorf("the rules name %s, which the bus does not export", m[1])
			}
			for _, r := range strings.Split(m[3], "|") {
				if r != "" && !reasons[m[1]+"/"+r] {
					t.Errorf("the rules name %s{reason=%q}, which the bus does not count", m[1], r)
				}
			}
		}
	}
	if seen < 4 {
		t.Errorf("found %d ovbus_ metrics in the rules' expressions", seen)
	}
}
