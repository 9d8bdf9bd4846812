package config

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// The converters accept what the JSON and YAML parsers produce (string,
// bool, int64, float64, nil, []any, map[string]any) and, so that variables
// and flags need no parsing of their own, the same values as strings.

// describe shows a value in an error: "abc" quoted, numbers as written.
func describe(v any) string {
	switch x := v.(type) {
	case nil:
		return "null"
	case string:
		return strconv.Quote(x)
	case bool:
		return strconv.FormatBool(x)
	case int64:
		return strconv.FormatInt(x, 10)
	case float64:
		return strconv.FormatFloat(x, 'g', -1, 64)
	case map[string]any:
		return "an object"
	case []any:
		return "a list"
	}
	return fmt.Sprintf("%v", v)
}

func expected(want string, v any) error {
	return fmt.Errorf("expected %s, got %s", want, describe(v))
}

func asString(v any) (string, error) {
	if s, ok := v.(string); ok {
		return s, nil
	}
	return "", expected("a string", v)
}

func asBool(v any) (bool, error) {
	switch x := v.(type) {
	case bool:
		return x, nil
	case int64:
		if x == 0 || x == 1 {
			return x == 1, nil
		}
	case string:
		switch strings.ToLower(strings.TrimSpace(x)) {
		case "true", "yes", "on", "1":
			return true, nil
		case "false", "no", "off", "0":
			return false, nil
		}
	}
	return false, expected("true or false", v)
}

// asInt converts integers, integral floats and decimal strings; want names
// the accepted range in the error.
func asInt(v any, lo, hi int64, want string) (int64, error) {
	var n int64
	switch x := v.(type) {
	case int64:
		n = x
	case float64:
		if x != math.Trunc(x) || x < math.MinInt64 || x >= math.MaxInt64 {
			return 0, expected(want, v)
		}
		n = int64(x)
	case string:
		s := strings.TrimSpace(x)
		i, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			f, ferr := strconv.ParseFloat(s, 64)
			if ferr != nil || f != math.Trunc(f) || f < math.MinInt64 || f >= math.MaxInt64 {
				return 0, expected(want, v)
			}
			i = int64(f)
		}
		n = i
	default:
		return 0, expected(want, v)
	}
	if n < lo || n > hi {
		return 0, expected(want, v)
	}
	return n, nil
}

// asFloat converts numbers and decimal strings.
func asFloat(v any, want string) (float64, error) {
	var f float64
	switch x := v.(type) {
	case int64:
		f = float64(x)
	case float64:
		f = x
	case string:
		p, err := strconv.ParseFloat(strings.TrimSpace(x), 64)
		if err != nil {
			return 0, expected(want, v)
		}
		f = p
	default:
		return 0, expected(want, v)
	}
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, expected(want, v)
	}
	return f, nil
}

// asSeconds converts a number of seconds (10, 0.5, "10") or a Go duration
// string ("500ms", "1m").
func asSeconds(v any) (time.Duration, error) {
	const want = "a number of seconds (or a duration such as \"500ms\")"
	if s, ok := v.(string); ok {
		if d, err := time.ParseDuration(strings.TrimSpace(s)); err == nil {
			return d, nil
		}
	}
	f, err := asFloat(v, want)
	if err != nil {
		return 0, err
	}
	if math.Abs(f) > 1e9 { // about 31 years: surely a mistake, and no overflow
		return 0, expected(want, v)
	}
	return time.Duration(f * float64(time.Second)), nil
}

func asStringList(v any) ([]string, error) {
	list, ok := v.([]any)
	if !ok {
		return nil, expected("a list of strings", v)
	}
	out := make([]string, 0, len(list))
	for i, e := range list {
		s, ok := e.(string)
		if !ok {
			return nil, fmt.Errorf("entry %d: %w", i, expected("a string", e))
		}
		out = append(out, s)
	}
	return out, nil
}
