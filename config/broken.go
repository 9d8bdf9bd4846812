package config

import (
	"errors"
	"io/fs"
	"os"
	"strings"
)

// A file of the stack that cannot be read or parsed is skipped, as
// ovos-config's LocalConf.load_local does: it logs the exception and goes on
// without the file, so that a stray comma in one mycroft.conf does not leave
// OVOS without a bus. On a reload such a file keeps the version last read
// whole, as a LocalConf keeps its keys when reloading it fails. In strict
// mode (LoadOptions.Strict, OVOS_BUS_STRICT_CONFIG=true, --strict-config)
// such a file is an error instead.
//
// A value of the wrong type or out of range is an error in both modes: the
// file was read as its author wrote it, and skipping the whole file for one
// value would silently drop its other settings, auth among them. (A file
// skipped at start loses its auth settings too: where the bus relies on
// them, strict mode is the safe choice.)

// StrictEnv is the variable that turns strict mode on (true) or off (false)
// when --strict-config is not given.
const StrictEnv = "OVOS_BUS_STRICT_CONFIG"

// Statuses of a Layer whose file could not be read or parsed.
const (
	// StatusSkipped: Load went on without the file.
	StatusSkipped = "skipped: cannot be read or parsed"
	// StatusKept: on a reload, Load used the version of the file it read
	// before (LoadOptions.Previous).
	StatusKept     = "previous version kept: cannot be read or parsed"
	statusNotFound = "not found"
	statusError    = "error"
)

// strictMode says whether files that cannot be read or parsed are errors:
// LoadOptions.Strict, else --strict-config if given, else StrictEnv.
func strictMode(e env, opts LoadOptions) (bool, error) {
	if opts.Strict {
		return true, nil
	}
	if f := opts.Flags; f != nil && f.strict.set {
		return f.strict.on, nil
	}
	v, ok := e(StrictEnv)
	if !ok || strings.TrimSpace(v) == "" {
		return false, nil
	}
	on, err := asBool(v)
	if err != nil {
		return false, &Error{Source: "env " + StrictEnv, Msg: err.Error()}
	}
	return on, nil
}

// stackReader reads the files of the stack for one Load and records in
// prov what became of each.
type stackReader struct {
	strict bool
	prev   *Provenance // the configuration in force, on a reload; nil at start
	prov   *Provenance
}

func (r *stackReader) note(name, path, status string, err *Error) {
	r.prov.Layers = append(r.prov.Layers, Layer{Name: name, Path: path, Status: status, Err: err})
}

// read reads one file of the stack. A missing file gives nil, nil (or an
// error when required); one that cannot be read or parsed gives nil, nil
// when skipped, its previous version when kept, or the *Error in strict mode.
func (r *stackReader) read(name, path string, f func(string, []byte) format, required bool) (*layer, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		if required {
			r.note(name, path, statusError, nil)
			return nil, &Error{File: path, Msg: "file not found (named by OVOS_BUS_CONFIG_FILE)"}
		}
		r.note(name, path, statusNotFound, nil)
		return nil, nil
	}
	var t *tree
	if err != nil {
		err = readError(path, err)
	} else {
		t, err = parse(path, data, f(path, data))
	}
	if err == nil {
		r.prov.good[path] = data
		r.note(name, path, "loaded", nil)
		return &layer{name: name, label: name + " " + path, file: path, tree: t}, nil
	}
	var ce *Error
	if r.strict || !errors.As(err, &ce) {
		r.note(name, path, statusError, nil)
		return nil, err
	}
	if old, ok := r.prev.goodData(path); ok {
		if t, perr := parse(path, old, f(path, old)); perr == nil {
			r.prov.good[path] = old
			r.note(name, path, StatusKept, ce)
			return &layer{name: name, label: name + " " + path + " (previous version)", file: path, tree: t}, nil
		}
	}
	r.note(name, path, StatusSkipped, ce)
	return nil, nil
}

// readError is the *Error of a file that exists but cannot be read.
func readError(path string, err error) *Error {
	msg := "cannot read: " + err.Error()
	var pe *fs.PathError
	if errors.As(err, &pe) {
		msg = "cannot read: " + pe.Err.Error()
	}
	return &Error{File: path, Msg: msg, Err: err}
}

// goodData returns the content path had when it was last read whole.
func (p *Provenance) goodData(path string) ([]byte, bool) {
	if p == nil {
		return nil, false
	}
	d, ok := p.good[path]
	return d, ok
}

// Broken returns the files of the stack that could not be read or parsed
// and that Load went on without (Status StatusSkipped) or, on a reload,
// with the version it read before (StatusKept), in merge order. Each has
// its Err, which names the file, line and column. Log them as errors: the
// configuration in force lacks what the files say now.
func (p *Provenance) Broken() []Layer {
	if p == nil {
		return nil
	}
	var out []Layer
	for _, l := range p.Layers {
		if l.Err != nil && l.Status != statusError {
			out = append(out, l)
		}
	}
	return out
}
