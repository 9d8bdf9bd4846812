package bus

import (
	"strings"
	"testing"
)

// matchReference is MatchType written the obvious (exponential) way.
func matchReference(pattern, s string) bool {
	if pattern == "" {
		return s == ""
	}
	if pattern[0] == '*' {
		for i := 0; i <= len(s); i++ {
			if matchReference(pattern[1:], s[i:]) {
				return true
			}
		}
		return false
	}
	return s != "" && s[0] == pattern[0] && matchReference(pattern[1:], s[1:])
}

func TestMatchType(t *testing.T) {
	tests := []struct {
		pattern, typ string
		want         bool
	}{
		{"*", "anything", true},
		{"*", "", true},
		{"", "", true},
		{"", "speak", false},
		{"speak", "speak", true},
		{"speak", "speaks", false},
		{"speak", "spea", false},
		{"recognizer_loop:*", "recognizer_loop:utterance", true},
		{"recognizer_loop:*", "recognizer_loop:", true},
		{"recognizer_loop:*", "recognizer_loop", false},
		{"*.response", "mycroft.skills.response", true},
		{"*.response", "mycroft.skills.responses", false},
		{"a*b*c", "aXXbYYc", true},
		{"a*b*c", "aXXbYY", false},
		{"a*a*a", "aaa", true},
		{"a**", "a", true},
		{"ovos.*.get", "ovos.skills.x.get", true},
	}
	for _, tt := range tests {
		if got := MatchType(tt.pattern, tt.typ); got != tt.want {
			t.Errorf("MatchType(%q, %q) = %v, want %v", tt.pattern, tt.typ, got, tt.want)
		}
		if ref := matchReference(tt.pattern, tt.typ); ref != tt.want {
			t.Errorf("reference(%q, %q) = %v", tt.pattern, tt.typ, ref)
		}
	}
}

func FuzzMatchType(f *testing.F) {
	f.Add("recognizer_loop:*", "recognizer_loop:utterance")
	f.Add("a*b*c", "aXbXc")
	f.Add("*.*", "a.b")
	f.Fuzz(func(t *testing.T, pattern, typ string) {
		if len(pattern) > 24 || len(typ) > 48 {
			return // keep the reference fast
		}
		simple := pattern
		for strings.Contains(simple, "**") {
			simple = strings.ReplaceAll(simple, "**", "*")
		}
		if strings.Count(simple, "*") > 5 {
			return
		}
		if got, want := MatchType(pattern, typ), matchReference(simple, typ); got != want {
			t.Errorf("MatchType(%q, %q) = %v, reference %v", pattern, typ, got, want)
		}
	})
}

func TestPermissions(t *testing.T) {
	all := Permissions{}
	none := Permissions{Emit: []string{}, Receive: []string{}}
	some := Permissions{Emit: []string{"speak", "recognizer_loop:*"}, Receive: []string{"*"}}
	if !all.CanEmit("x") || !all.CanReceive("") {
		t.Error("absent lists must allow everything")
	}
	if none.CanEmit("x") || none.CanReceive("x") {
		t.Error("empty lists must allow nothing")
	}
	if !some.CanEmit("speak") || !some.CanEmit("recognizer_loop:wakeword") || some.CanEmit("mycroft.stop") || !some.CanReceive("") {
		t.Error("patterns not applied")
	}
}

func TestOriginAllowed(t *testing.T) {
	if !OriginAllowed(nil, "http://evil.example") {
		t.Error("empty allowed_origins must accept every origin")
	}
	allowed := []string{"http://localhost:*", "https://OVOS.local"}
	for origin, want := range map[string]bool{
		"":                        true, // non-browser clients
		"http://localhost:8080":   true,
		"https://ovos.local":      true,
		"HTTP://LOCALHOST:1":      true,
		"http://evil.example":     false,
		"https://ovos.local.evil": false,
	} {
		if got := OriginAllowed(allowed, origin); got != want {
			t.Errorf("OriginAllowed(%q) = %v, want %v", origin, got, want)
		}
	}
}
