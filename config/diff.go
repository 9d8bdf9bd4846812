package config

import (
	"reflect"
	"slices"

	"github.com/ovbus/ovbus/bus"
)

// Diff lists the keys whose values differ between old and new, split into
// those the running bus can apply at once (live) and those that take a
// restart (restart), in the key table's order. Keys are named as in the
// configuration: "port", "max_msg_size", "log_level".
//
// The bus's keys are compared and classified by bus.Diff, the same answer
// bus.Server.Apply gives; the keys of config's own by their rows in the
// key table. Live keys apply to messages and connections from the moment
// of the reload: a smaller max_msg_size or queue bound applies to what is
// read or queued afterwards, auth and allowed_origins to connections
// accepted afterwards, the timeouts to the next write, handshake or
// shutdown, log_level at once.
func Diff(old, new *Config) (live, restart []string) {
	live, restart = bus.Diff(old.Options(), new.Options())
	for i := range keys {
		k := &keys[i]
		if k.own == nil || reflect.DeepEqual(k.value(old), k.value(new)) {
			continue
		}
		if k.when() == bus.Live {
			live = append(live, k.name)
		} else {
			restart = append(restart, k.name)
		}
	}
	return inTableOrder(live), inTableOrder(restart)
}

// inTableOrder sorts key names as the key table lists them; a name that is
// not in it (a bus option without a key) comes last.
func inTableOrder(names []string) []string {
	rank := func(name string) int {
		for i := range keys {
			if keys[i].name == name {
				return i
			}
		}
		return len(keys)
	}
	slices.SortStableFunc(names, func(a, b string) int { return rank(a) - rank(b) })
	return names
}

// Reload compares the running configuration c with next, loaded again on
// SIGHUP, and returns the configuration then in force: next, with every
// key that needs a restart kept at its running value (so that a later
// reload reports it again), plus what Diff says changed.
func (c *Config) Reload(next *Config) (applied *Config, live, restart []string) {
	live, restart = Diff(c, next)
	applied = next.Clone()
	for _, name := range restart {
		if k := lookupKey(name); k != nil {
			reflect.ValueOf(k.field(applied)).Elem().Set(reflect.ValueOf(k.field(c)).Elem())
		}
	}
	return applied, live, restart
}
