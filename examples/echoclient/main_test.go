package main

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/ovbus/ovbus/ws"
)

// fakeSuite plays Autobahn's fuzzingserver protocol: getCaseCount answers
// with the number of cases, each runCase sends messages and checks the
// echoes, updateReports records that it was called.
type fakeSuite struct {
	mu      sync.Mutex
	cases   int
	echoed  map[int]int // case -> echoes that matched
	agents  []string
	reports int
}

func (f *fakeSuite) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	c, err := ws.Accept(w, r, &ws.AcceptOptions{EnableCompression: true})
	if err != nil {
		return
	}
	defer c.CloseNow()
	ctx := r.Context()
	switch r.URL.Path {
	case "/getCaseCount":
		c.WriteMessage(ctx, ws.TextMessage, []byte(fmt.Sprint(f.cases)))
		c.Close(ws.StatusNormalClosure, "")
	case "/runCase":
		var n int
		fmt.Sscan(r.URL.Query().Get("case"), &n)
		f.mu.Lock()
		f.agents = append(f.agents, r.URL.Query().Get("agent"))
		f.mu.Unlock()
		for i := range 3 {
			msg := strings.Repeat(fmt.Sprintf("case %d message %d ", n, i), 20*(i+1))
			op := ws.TextMessage
			if i == 1 {
				op = ws.BinaryMessage
			}
			c.WriteMessage(ctx, op, []byte(msg))
			gotOp, got, err := c.ReadMessage(ctx)
			if err != nil || gotOp != op || string(got) != msg {
				break
			}
			f.mu.Lock()
			f.echoed[n]++
			f.mu.Unlock()
		}
		c.Close(ws.StatusNormalClosure, "")
	case "/updateReports":
		f.mu.Lock()
		f.reports++
		f.mu.Unlock()
		c.Close(ws.StatusNormalClosure, "")
	}
}

func TestAutobahnClientMode(t *testing.T) {
	f := &fakeSuite{cases: 4, echoed: map[int]int{}}
	srv := httptest.NewServer(f)
	defer srv.Close()
	if err := runSuite("ws"+strings.TrimPrefix(srv.URL, "http"), "ovbus test"); err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for i := 1; i <= f.cases; i++ {
		if f.echoed[i] != 3 {
			t.Errorf("case %d: %d of 3 messages echoed", i, f.echoed[i])
		}
	}
	for _, a := range f.agents {
		if a != "ovbus test" {
			t.Errorf("agent %q, want %q", a, "ovbus test")
		}
	}
	if f.reports != 1 {
		t.Errorf("updateReports called %d times, want 1", f.reports)
	}
}

func TestCaseCountError(t *testing.T) {
	if _, err := caseCount(context.Background(), "ws://127.0.0.1:1"); err == nil {
		t.Fatal("no error for an unreachable suite")
	}
}
