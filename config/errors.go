package config

import (
	"strconv"
	"strings"
)

// Error is the one error type of this package: a configuration file, variable
// or flag that cannot be used. Read it with errors.As.
//
// Its text reads
//
//	config: /etc/mycroft/mycroft.conf:12:5: invalid JSON: ...
//	config: /etc/mycroft/mycroft.conf:7:5: websocket.port: expected an integer 0-65535, got "abc"
//	config: env OVOS_BUS_PORT: websocket.port: expected an integer 0-65535, got "abc"
type Error struct {
	// File is the configuration file at fault, if a file is.
	File string
	// Line and Col locate the fault in File, 1-based; 0 when unknown.
	Line, Col int
	// Source names the layer at fault when it is not a file:
	// "env OVOS_BUS_PORT", "flag --port".
	Source string
	// Key is the dotted key at fault, "websocket.port", if one is.
	Key string
	// Msg says what was wrong and what was expected.
	Msg string
	// Err is the underlying error, if any (an *fs.PathError for an
	// unreadable file).
	Err error
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("config: ")
	switch {
	case e.File != "":
		b.WriteString(e.File)
		if e.Line > 0 {
			b.WriteString(":" + strconv.Itoa(e.Line))
			if e.Col > 0 {
				b.WriteString(":" + strconv.Itoa(e.Col))
			}
		}
		b.WriteString(": ")
	case e.Source != "":
		b.WriteString(e.Source + ": ")
	}
	if e.Key != "" {
		b.WriteString(e.Key + ": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

func (e *Error) Unwrap() error { return e.Err }
