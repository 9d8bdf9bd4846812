package main

import (
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ovbus/ovbus/bus"
	"github.com/ovbus/ovbus/config"
)

// configFiles is what serve says about the files of the configuration in force that could not
// be read or parsed (config.Provenance.Broken), which the bus runs without or with the version
// read before: an ERROR line per file at every load, a "config:" line in /health (from the first
// such file on; /health stays 200: the bus works) and the gauge ovbus_config_files_broken.
type configFiles struct {
	mu     sync.Mutex
	broken []config.Layer
	srv    *bus.Server
	health bool // the /health line is registered
}

// set records the files of a configuration that is now in force and logs each broken one.
func (c *configFiles) set(prov *config.Provenance, logger *slog.Logger) {
	broken := prov.Broken()
	for _, l := range broken {
		what := "skipped, the bus runs without it"
		if l.Status == config.StatusKept {
			what = "the bus keeps the version it read before"
		}
		logger.Error(fmt.Sprintf("Configuration file cannot be used (%s; --strict-config or %s=true to refuse it instead): %s",
			what, config.StrictEnv, l.Err))
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.broken = broken
	c.addHealth()
}

// attach registers the gauge on srv's metrics and, once a file is broken, the /health line.
func (c *configFiles) attach(srv *bus.Server) {
	srv.Metrics().MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: "ovbus", Name: "config_files_broken",
		Help: "Files of the configuration stack that could not be read or parsed at the last load or reload: " +
			"the bus runs without them, or with the version it read before (the log and /health name them).",
	}, func() float64 {
		c.mu.Lock()
		defer c.mu.Unlock()
		return float64(len(c.broken))
	}))
	c.mu.Lock()
	defer c.mu.Unlock()
	c.srv = srv
	c.addHealth()
}

func (c *configFiles) addHealth() {
	if c.health || c.srv == nil || len(c.broken) == 0 {
		return
	}
	c.health = true
	c.srv.AddHealth("config", c.state)
}

// state is the /health line: "every file read", or the broken files with where each is wrong.
func (c *configFiles) state() (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.broken) == 0 {
		return "every file read", true
	}
	parts := make([]string, len(c.broken))
	for i, l := range c.broken {
		at := l.Path
		if l.Err.Line > 0 {
			at += ":" + strconv.Itoa(l.Err.Line)
			if l.Err.Col > 0 {
				at += ":" + strconv.Itoa(l.Err.Col)
			}
		}
		what := "skipped"
		if l.Status == config.StatusKept {
			what = "previous version kept"
		}
		parts[i] = at + " (" + what + ")"
	}
	noun := "files"
	if len(parts) == 1 {
		noun = "file"
	}
	return fmt.Sprintf("%d %s cannot be read or parsed: %s", len(parts), noun, strings.Join(parts, ", ")), true
}
