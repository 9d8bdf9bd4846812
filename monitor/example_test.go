package monitor_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"

	"github.com/ovbus/ovbus/bus"
	"github.com/ovbus/ovbus/monitor"
)

// The monitor beside a bus, on a listener of its own, as ovbus serve runs
// it with monitor_address set.
func ExampleNew() {
	srv, err := bus.New(bus.Options{Addr: "127.0.0.1:0", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		panic(err)
	}
	if err := srv.Start(); err != nil {
		panic(err)
	}
	defer srv.Shutdown(context.Background())

	m, err := monitor.New(srv, monitor.Options{Addr: "127.0.0.1:0"})
	if err != nil {
		panic(err)
	}
	if err := m.Start(); err != nil {
		panic(err)
	}
	defer m.Shutdown(context.Background())

	resp, err := http.Get("http://" + m.Addr().String() + "/")
	if err != nil {
		panic(err)
	}
	resp.Body.Close()
	fmt.Println(resp.Status, resp.Header.Get("Content-Type"))

	_, err = monitor.New(srv, monitor.Options{Addr: "0.0.0.0:9182"})
	fmt.Println(err)
	// Output:
	// 200 OK text/html; charset=utf-8
	// monitor: address "0.0.0.0:9182" is not a loopback address; set monitor_allow_remote to serve the monitor to other machines
}
