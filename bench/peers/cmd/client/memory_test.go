package main

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
)

func TestMemoryBreakdown(t *testing.T) {
	objects := 1000
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "# HELP go_memory_classes_heap_objects_bytes x\ngo_memory_classes_heap_objects_bytes %d\n", objects)
		fmt.Fprintf(w, "go_memory_classes_heap_stacks_bytes 4096\ngo_memory_classes_os_stacks_bytes 0\n")
		fmt.Fprintf(w, "go_memory_classes_metadata_other_bytes 1.5e+06\ngo_gc_heap_live_bytes 7\n")
	}))
	defer srv.Close()
	before, err := readMemory(os.Getpid(), srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	if before.kinds["RssAnon"] <= 0 || before.kinds["VmRSS"] <= 0 {
		t.Errorf("resident kinds of this process: %v", before.kinds)
	}
	if got := before.classes["metadata_other"]; got != 1_500_000 {
		t.Errorf("metadata_other %d, want 1500000", got)
	}
	if _, ok := before.classes["heap_live"]; ok {
		t.Error("a metric outside go_memory_classes_ was read as a class")
	}
	objects = 11000
	after, err := readMemory(os.Getpid(), srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	got := memBreakdown(before, after, 10)
	for _, want := range []string{"resident per connection: anonymous ", "heap objects 1000 B, ", "stacks 0 B, ", "runtime metadata 0 B, "} {
		if !strings.Contains(got, want) {
			t.Errorf("breakdown lacks %q:\n%s", want, got)
		}
	}
	if got := memBreakdown(before, memSnapshot{kinds: after.kinds}, 10); strings.Contains(got, "Go runtime") {
		t.Errorf("breakdown without classes after: %s", got)
	}
}

func TestMemoryClassesMissing(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "go_goroutines 3")
	}))
	defer srv.Close()
	m, err := goMemoryClasses(srv.URL)
	if err != nil || len(m) != 0 {
		t.Fatalf("a page without classes: %v, %v", m, err)
	}
	empty := memSnapshot{kinds: map[string]int64{}, classes: m}
	if got := memBreakdown(empty, empty, 1); !strings.Contains(got, "exports no go_memory_classes_*") {
		t.Errorf("breakdown from a server without classes: %s", got)
	}
	srv.Close()
	if _, err := goMemoryClasses(srv.URL); err == nil {
		t.Error("a server that is gone: no error")
	}
}
