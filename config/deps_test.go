package config

import (
	"os/exec"
	"strings"
	"testing"
)

// Loading a configuration must not compile NATS: config reaches the
// cluster's options through cluster/clusterconf, never package cluster.
func TestConfigDoesNotCompileNATS(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", ".").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, p := range strings.Fields(string(out)) {
		if strings.Contains(p, "nats-io") || p == "github.com/ovbus/ovbus/cluster" {
			t.Errorf("config depends on %s", p)
		}
	}
}
