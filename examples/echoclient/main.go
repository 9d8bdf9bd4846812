// Command echoclient is a WebSocket client on package ws.
//
// Plain mode sends each line of standard input as a text message and prints
// what the server answers:
//
//	go run ./examples/echoclient -url ws://127.0.0.1:9001/
//
// Conformance mode drives Autobahn|Testsuite's fuzzingserver: it asks for the
// number of cases, connects to each case and echoes every message back until
// the server closes, then asks the server to write its reports:
//
//	go run ./examples/echoclient -autobahn ws://127.0.0.1:9001 -agent ovbus
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"net/url"
	"os"
	"strconv"
	"time"

	"github.com/ovbus/ovbus/ws"
)

func main() {
	target := flag.String("url", "ws://127.0.0.1:9001/", "echo server URL (plain mode)")
	suite := flag.String("autobahn", "", "fuzzingserver base URL: run every case in client mode")
	agent := flag.String("agent", "ovbus", "agent name reported to the fuzzingserver")
	flag.Parse()

	if *suite != "" {
		if err := runSuite(*suite, *agent); err != nil {
			log.Fatal(err)
		}
		return
	}
	if err := interactive(*target); err != nil {
		log.Fatal(err)
	}
}

func interactive(target string) error {
	ctx := context.Background()
	c, _, err := ws.Dial(ctx, target, &ws.DialOptions{EnableCompression: true})
	if err != nil {
		return err
	}
	defer c.Close(ws.StatusNormalClosure, "")
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		if err := c.WriteMessage(ctx, ws.TextMessage, in.Bytes()); err != nil {
			return err
		}
		_, msg, err := c.ReadMessage(ctx)
		if err != nil {
			return err
		}
		fmt.Printf("%s\n", msg)
	}
	return in.Err()
}

var dialOpts = &ws.DialOptions{
	EnableCompression: true,
	MaxMessageSize:    64 << 20,
	MaxFrameSize:      64 << 20,
}

func runSuite(base, agent string) error {
	ctx := context.Background()
	count, err := caseCount(ctx, base)
	if err != nil {
		return err
	}
	log.Printf("running %d cases as agent %q", count, agent)
	for i := 1; i <= count; i++ {
		u := fmt.Sprintf("%s/runCase?case=%d&agent=%s", base, i, url.QueryEscape(agent))
		if err := echoCase(ctx, u); err != nil {
			log.Printf("case %d: %v", i, err)
		}
	}
	c, _, err := ws.Dial(ctx, base+"/updateReports?agent="+url.QueryEscape(agent), dialOpts)
	if err != nil {
		return err
	}
	c.Close(ws.StatusNormalClosure, "")
	return nil
}

func caseCount(ctx context.Context, base string) (int, error) {
	c, _, err := ws.Dial(ctx, base+"/getCaseCount", dialOpts)
	if err != nil {
		return 0, err
	}
	defer c.CloseNow()
	_, msg, err := c.ReadMessage(ctx)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(string(msg))
}

// echoCase echoes until the server ends the case. A close from the server is
// the normal end; protocol errors are what the case tests for.
func echoCase(ctx context.Context, u string) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	c, _, err := ws.Dial(ctx, u, dialOpts)
	if err != nil {
		return err
	}
	defer c.CloseNow()
	var buf []byte
	for {
		op, msg, err := c.ReadMessageInto(ctx, buf[:0])
		if err != nil {
			var ce *ws.CloseError
			if errors.As(err, &ce) {
				return nil
			}
			return err
		}
		buf = msg
		if err := c.WriteMessage(ctx, op, msg); err != nil {
			return err
		}
	}
}
