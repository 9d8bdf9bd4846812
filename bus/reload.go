package bus

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
)

// Reload says when a change to an option takes effect on a running Server.
type Reload uint8

const (
	// Restart options keep the value New was given; Apply reports a change.
	Restart Reload = iota
	// Live options are changed by Apply.
	Live
)

func (r Reload) String() string {
	if r == Live {
		return "live"
	}
	return "restart"
}

// option is one field of Options, as its tag describes it.
type option struct {
	index  int
	name   string
	reload Reload
	keep   bool // tag "-": not an option; Apply always keeps it
}

// optionList reads the fields of Options once.
var optionList = sync.OnceValue(func() []option {
	t := reflect.TypeFor[Options]()
	var out []option
	for i := range t.NumField() {
		f := t.Field(i)
		o := option{index: i, name: strings.ToLower(f.Name), reload: Restart}
		tag, ok := f.Tag.Lookup("ovbus")
		switch {
		case tag == "-":
			o.keep = true
		case ok:
			name, reload, _ := strings.Cut(tag, ",")
			o.name = name
			switch reload {
			case "live":
				o.reload = Live
			case "restart":
			default:
				panic(fmt.Sprintf("bus: Options.%s: tag %q: want \"name,live\" or \"name,restart\"", f.Name, tag))
			}
		}
		out = append(out, o)
	}
	return out
})

// OptionReload returns when a change to the named option (its name in the
// configuration, as in Options' tags) takes effect, and false when Options
// has no option of that name.
func OptionReload(name string) (Reload, bool) {
	for _, o := range optionList() {
		if o.name == name && !o.keep {
			return o.reload, true
		}
	}
	return Restart, false
}

// Diff names the options that differ between old and new (zero fields
// count as their defaults), split into those Apply changes on a running
// server and those that need a restart; each list is sorted and names an
// option once. It is the one answer to "what did this change": Apply
// reports it, and package config reports it for SIGHUP and its own diff.
// "address" is named only when Addr changed on its own, not as a
// consequence of host or port.
func Diff(old, new Options) (live, restart []string) {
	a, b := old.withDefaults(), new.withDefaults()
	va, vb := reflect.ValueOf(&a).Elem(), reflect.ValueOf(&b).Elem()
	for _, o := range optionList() {
		if o.keep || equalValues(va.Field(o.index), vb.Field(o.index)) {
			continue
		}
		if o.reload == Live {
			live = append(live, o.name)
		} else {
			restart = append(restart, o.name)
		}
	}
	if slices.Contains(restart, "host") || slices.Contains(restart, "port") {
		restart = slices.DeleteFunc(restart, func(n string) bool { return n == "address" })
	}
	slices.Sort(live)
	slices.Sort(restart)
	return slices.Compact(live), slices.Compact(restart)
}

// equalValues compares two values of one Options field: pointers,
// functions and channels by identity, the rest by content (a nil and an
// empty permission list differ, as they do in meaning).
func equalValues(a, b reflect.Value) bool {
	switch a.Kind() {
	case reflect.Pointer, reflect.Func, reflect.Chan, reflect.UnsafePointer:
		return a.Pointer() == b.Pointer()
	case reflect.Interface:
		if a.IsNil() || b.IsNil() {
			return a.IsNil() == b.IsNil()
		}
		if a.Elem().Type() == b.Elem().Type() && a.Elem().Comparable() {
			return a.Elem().Equal(b.Elem())
		}
	}
	return reflect.DeepEqual(a.Interface(), b.Interface())
}

// keepRestart sets every option of o that Apply does not change to its
// value in running.
func keepRestart(o *Options, running *Options) {
	vo, vr := reflect.ValueOf(o).Elem(), reflect.ValueOf(running).Elem()
	for _, opt := range optionList() {
		if opt.keep || opt.reload == Restart {
			vo.Field(opt.index).Set(vr.Field(opt.index))
		}
	}
}

// liveOptions are the options in force; Apply replaces them.
type liveOptions struct {
	opts Options
	// access is opts.Auth compiled: the grants new connections get.
	access *access
	// needTypes: some client may have receive permissions, so every
	// published entry carries its message type.
	needTypes bool
}

func newLive(o Options) *liveOptions {
	ac := compileAccess(&o.Auth)
	return &liveOptions{opts: o, access: ac, needTypes: ac.receiveRules}
}

// Apply changes the options in force to opts, as far as a running server
// can: each option's tag in Options says whether it is live or needs a
// restart. Live options apply to what is read, queued, written or accepted
// from then on (a lowered MaxMsgSize holds connected clients too; auth and
// allowed origins apply to new connections). Restart options keep their
// running values; so does the Logger (change the level through its
// handler). changed and restart are Diff(running, opts). An invalid opts
// changes nothing and returns the error.
func (s *Server) Apply(opts Options) (changed, restart []string, err error) {
	o := opts.withDefaults()
	if err := o.validate(); err != nil {
		return nil, nil, fmt.Errorf("bus: %w", err)
	}
	old := s.live.Load().opts
	changed, restart = Diff(old, o)
	keepRestart(&o, &old)
	if o.MaxQueueMessages != old.MaxQueueMessages || o.MaxQueueBytes != old.MaxQueueBytes {
		s.hub.setLimits(o.MaxQueueMessages, o.MaxQueueBytes)
	}
	s.hub.stallAfter.Store(int64(o.cutGrace()))
	s.live.Store(newLive(o))
	return changed, restart, nil
}

// Live returns the options in force (those given to New, changed by Apply),
// with defaults filled in.
func (s *Server) Live() Options { return s.live.Load().opts }
