package bench

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
)

// The machine a report was made on.

// Machine describes where the benchmark ran.
type Machine struct {
	// CPUs is how many CPUs this process may run on; OnlineCPUs is the
	// machine's count when the process's affinity mask holds fewer
	// (taskset, bench/run.sh --pin), else 0.
	CPUs       int     `json:"cpus"`
	OnlineCPUs int     `json:"online_cpus,omitempty"`
	CPUModel   string  `json:"cpu_model"`
	GoVersion  string  `json:"go_version"`
	OS         string  `json:"os"`
	Kernel     string  `json:"kernel,omitempty"`
	LoadAvg    float64 `json:"loadavg_1m_at_start"`
}

// cpusText says how many CPUs the client could use: "2 CPUs", or "1 of 2
// CPUs" under an affinity mask.
func (m Machine) cpusText() string {
	if m.OnlineCPUs > m.CPUs {
		return fmt.Sprintf("%d of %d CPUs", m.CPUs, m.OnlineCPUs)
	}
	return fmt.Sprintf("%d CPUs", m.CPUs)
}

// ThisMachine describes the machine the process runs on.
func ThisMachine() Machine {
	m := Machine{CPUs: runtime.NumCPU(), GoVersion: runtime.Version(), OS: runtime.GOOS + "/" + runtime.GOARCH}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for line := range strings.SplitSeq(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPUModel = strings.TrimSpace(v)
				break
			}
		}
	}
	if b, err := os.ReadFile("/sys/devices/system/cpu/online"); err == nil {
		if n := countCPUList(strings.TrimSpace(string(b))); n > m.CPUs {
			m.OnlineCPUs = n
		}
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		fmt.Sscanf(string(b), "%g", &m.LoadAvg)
	}
	return m
}

// countCPUList counts the CPUs of a Linux CPU list such as "0-3,8,10-11"
// (/sys/devices/system/cpu/online); 0 when it does not parse.
func countCPUList(list string) int {
	n := 0
	for part := range strings.SplitSeq(list, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil {
			return 0
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil || b < a {
				return 0
			}
		}
		n += b - a + 1
	}
	return n
}
