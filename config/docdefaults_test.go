package config

import (
	"encoding/json"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// A default lives in one place (bus/options.go, cluster's Defaults, the
// key table); the documents that repeat one for their readers are checked
// against it here, so that changing a default fails this test until every
// copy says the same: config/doc.go's key table, the README's limits table
// and docs/protocol.md §4.

// defaultJSON is the built-in value of key as --print-config shows it, as
// compact JSON.
func defaultJSON(t *testing.T, k *key) string {
	t.Helper()
	b, err := json.Marshal(k.value(Default()))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// docDefault normalises a default as a document writes it: the value
// before any " (" explanation, "unset" as null, no spaces inside a list.
func docDefault(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.Index(s, " ("); i > 0 {
		s = s[:i]
	}
	s = strings.Trim(s, "`")
	if s == "unset" {
		return "null"
	}
	return strings.ReplaceAll(s, ", ", ",")
}

// TestDocTableDefaults: every default in config/doc.go's key table is the
// key's built-in value.
func TestDocTableDefaults(t *testing.T) {
	doc, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	// A row: the key (or "a, b"), then the default up to a gap of two spaces.
	row := regexp.MustCompile(`^//\t([a-z_.]+),?\s{2,}(\S.*?)\s{2,}`)
	seen := 0
	for _, line := range strings.Split(string(doc), "\n") {
		m := row.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		k := lookupKey(m[1])
		if k == nil || k.kind == kindAuth || k.kind == kindLevel {
			continue // auth and the log level are described, not valued
		}
		got, want := docDefault(m[2]), defaultJSON(t, k)
		if strings.HasPrefix(got, "$") {
			continue // a path the bus derives (log_file), described
		}
		seen++
		if got != want && !(want == `""` && got == "null") {
			t.Errorf("config/doc.go says %s defaults to %s; it is %s", k.name, m[2], want)
		}
	}
	if seen < len(keys)-5 { // auth, log_level, log_file, secret_key: described
		t.Errorf("checked the defaults of %d keys in doc.go, want at least %d", seen, len(keys)-5)
	}
}

// readmeUnits converts a README quantity to the unit of its key's value.
var readmeUnits = map[string]float64{"MiB": 1 << 20, "KiB": 1 << 10, "s": 1, "": 1}

// TestReadmeLimitsDefaults: the defaults of the README's limits table are
// the keys' built-in values.
func TestReadmeLimitsDefaults(t *testing.T) {
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile("^\\| (`[a-z_]+`(?:, `[a-z_]+`)*) \\| ([^|]+) \\|")
	quantity := regexp.MustCompile(`^(\d[\d ]*(?:\.\d+)?)\s*(MiB|KiB|s)?\b`)
	seen := 0
	for _, line := range strings.Split(string(readme), "\n") {
		m := row.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		names := strings.Split(strings.ReplaceAll(m[1], "`", ""), ", ")
		values := splitTop(m[2])
		for i, name := range names {
			k := lookupKey(name)
			if k == nil || i >= len(values) {
				continue
			}
			q := quantity.FindStringSubmatch(strings.TrimSpace(values[i]))
			if q == nil {
				continue // "open-file limit − 64": described, not valued
			}
			seen++
			n, _ := strconv.ParseFloat(strings.ReplaceAll(q[1], " ", ""), 64)
			n *= readmeUnits[q[2]]
			if k.kind == kindMiB {
				n /= 1 << 20 // max_msg_size is valued in MiB
			}
			var want float64
			json.Unmarshal([]byte(defaultJSON(t, k)), &want)
			if n != want {
				t.Errorf("README's limits table says %s defaults to %s; it is %v", name, strings.TrimSpace(values[i]), want)
			}
		}
	}
	if seen < 7 {
		t.Errorf("checked %d defaults in the README's limits table, want at least 7", seen)
	}
}

// splitTop splits a table cell at its commas outside parentheses: "64 MiB
// (at least 2 × x), 100 000" is two values.
func splitTop(s string) []string {
	var out []string
	depth, start := 0, 0
	for i, r := range s {
		switch r {
		case '(':
			depth++
		case ')':
			depth--
		case ',':
			if depth == 0 {
				out = append(out, s[start:i])
				start = i + 1
			}
		}
	}
	return append(out, s[start:])
}

// TestProtocolSection4Defaults: the defaults docs/protocol.md §4 lists
// are the keys' built-in values.
func TestProtocolSection4Defaults(t *testing.T) {
	doc, err := os.ReadFile("../docs/protocol.md")
	if err != nil {
		t.Fatal(err)
	}
	text := string(doc)
	start := strings.Index(text, "## §4")
	end := strings.Index(text, "## §5")
	if start < 0 || end < start {
		t.Fatal("docs/protocol.md has no §4")
	}
	row := regexp.MustCompile(`^\| ([a-z_]+)(?:, [a-z_]+)* \| ([^|]+) \|`)
	seen := 0
	for _, line := range strings.Split(text[start:end], "\n") {
		m := row.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		k := lookupKey(m[1])
		if k == nil || k.name == "shared_connection" {
			continue // read by clients only: no built-in value of the bus's
		}
		seen++
		got, want := docDefault(m[2]), defaultJSON(t, k)
		if got != want && !(want == `""` && got == "null") {
			t.Errorf("docs/protocol.md §4 says %s defaults to %s; it is %s", k.name, strings.TrimSpace(m[2]), want)
		}
	}
	if seen < 8 {
		t.Errorf("checked %d defaults in docs/protocol.md §4, want at least 8", seen)
	}
}
