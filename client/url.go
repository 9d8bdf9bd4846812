package client

import (
	"os"
	"strings"
)

// The bus's address from the environment.

// DefaultURL is the bus address of a default OVOS install (the websocket config section's host,
// port and route: docs/protocol.md §1).
const DefaultURL = "ws://127.0.0.1:8181/core"

// URLFromEnv returns the bus URL named by the variables of the Rust bus and its clients,
// OVOS_BUS_HOST, OVOS_BUS_PORT, OVOS_BUS_ROUTE and OVOS_BUS_USE_SSL, each defaulting to the part of
// DefaultURL it names.
func URLFromEnv() string {
	host := envOr("OVOS_BUS_HOST", "127.0.0.1")
	port := envOr("OVOS_BUS_PORT", "8181")
	route := envOr("OVOS_BUS_ROUTE", "/core")
	if !strings.HasPrefix(route, "/") {
		route = "/" + route
	}
	scheme := "ws"
	switch strings.ToLower(os.Getenv("OVOS_BUS_USE_SSL")) {
	case "1", "true", "yes", "on":
		scheme = "wss"
	}
	if strings.Contains(host, ":") && !strings.HasPrefix(host, "[") {
		host = "[" + host + "]" // IPv6 literal
	}
	return scheme + "://" + host + ":" + port + route
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}
