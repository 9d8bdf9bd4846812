// Command ovbus is the OpenVoiceOS message bus and its tools: serve runs the
// bus, listen and send talk to it, bench and loadtest measure it.
//
// main is flag parsing and wiring only; everything testable lives in the
// packages bus, client, config, bench and ws.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"
)

// command is one subcommand: run gets the arguments after the subcommand name
// and returns the process exit code.
type command struct {
	summary string
	run     func(args []string, stdout, stderr io.Writer) int
}

// commands is filled by each subcommand's file in its init function.
var commands = map[string]command{}

func register(name, summary string, run func(args []string, stdout, stderr io.Writer) int) {
	commands[name] = command{summary: summary, run: run}
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return 2
	}
	switch args[0] {
	case "-h", "-help", "--help":
		usage(stdout)
		return 0
	case "help":
		return runHelp(args[1:], stdout, stderr)
	case "-version", "--version":
		fmt.Fprintln(stdout, versionString())
		return 0
	}
	cmd, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "ovbus: unknown command %q\n\n", args[0])
		usage(stderr)
		return 2
	}
	return cmd.run(args[1:], stdout, stderr)
}

// runHelp is `ovbus help [COMMAND]`: the command list, or a command's help (its --help).
func runHelp(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stdout)
		return 0
	}
	cmd, ok := commands[args[0]]
	if !ok || len(args) > 1 {
		fmt.Fprintf(stderr, "ovbus help: unknown command %q\n\n", strings.Join(args, " "))
		usage(stderr)
		return 2
	}
	return cmd.run([]string{"--help"}, stdout, stderr)
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "Usage: ovbus COMMAND [flags]")
	fmt.Fprintln(w, "\nCommands:")
	names := make([]string, 0, len(commands))
	for name := range commands {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		fmt.Fprintf(w, "  %-9s %s\n", name, commands[name].summary)
	}
	fmt.Fprintln(w, "\nRun 'ovbus COMMAND --help' for the flags of a command.")
}

// newFlagSet returns a FlagSet whose usage text shows synopsis, every flag with its default, and
// exitHelp (the exit codes).
func newFlagSet(name, synopsis, exitHelp string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("ovbus "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		w := fs.Output()
		fmt.Fprintf(w, "Usage: %s\n\nFlags:\n", synopsis)
		fs.VisitAll(func(f *flag.Flag) {
			arg, usage := flag.UnquoteUsage(f)
			if a, ok := f.Value.(interface{ ArgName() string }); ok {
				arg = a.ArgName() // config's flags name their value after its kind
			}
			if arg != "" {
				arg = " " + arg
			}
			def := f.DefValue
			switch {
			case isStringFlag(f):
				def = fmt.Sprintf(" (default %q)", def)
			case def != "":
				def = " (default " + def + ")"
			} // else the usage says it (config's flags: "default 8181; env OVOS_BUS_PORT")
			fmt.Fprintf(w, "  --%s%s\n    \t%s%s\n", f.Name, arg, usage, def)
		})
		fmt.Fprint(w, exitHelp)
	}
	return fs
}

func isStringFlag(f *flag.Flag) bool {
	g, ok := f.Value.(flag.Getter)
	if !ok {
		return false
	}
	_, s := g.Get().(string)
	return s
}

// parseArgs parses flags that may come before, between or after the positional arguments
// ("send TYPE DATA --wait X" as well as "send --wait X TYPE DATA", "bench A=URL --repeat 3 B=URL"); everything after "--" is
// positional. The help is printed once: -h/--help prints it to stdout and returns flag.ErrHelp; a
// bad flag prints the error and a pointer to --help to the FlagSet's output (stderr).
func parseArgs(fs *flag.FlagSet, args []string, stdout io.Writer) ([]string, error) {
	usage := fs.Usage
	fs.Usage = func() {} // the flag package calls it on every error; we print once, below
	defer func() { fs.Usage = usage }()
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			fs.Usage = usage
			if errors.Is(err, flag.ErrHelp) {
				out := fs.Output()
				fs.SetOutput(stdout)
				fs.Usage()
				fs.SetOutput(out)
			} else {
				usageHint(fs, fs.Output())
			}
			return nil, err
		}
		rest := fs.Args()
		consumed := len(args) - len(rest)
		if consumed > 0 && args[consumed-1] == "--" {
			return append(pos, rest...), nil
		}
		if len(rest) == 0 {
			return pos, nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// parseFlagsOnly parses the command line of a command that takes no positional arguments (hint
// follows the error about one). ok false means the command is done: with exit code 0 after
// --help, or exitUsage after a mistake.
func parseFlagsOnly(fs *flag.FlagSet, args []string, stdout, stderr io.Writer, hint string) (code int, ok bool) {
	pos, err := parseArgs(fs, args, stdout)
	switch {
	case errors.Is(err, flag.ErrHelp):
		return exitOK, false
	case err != nil:
		return exitUsage, false
	case len(pos) > 0:
		return usageError(fs, stderr, "unexpected argument %q%s", pos[0], hint), false
	}
	return 0, true
}

// usageError prints the message and a pointer to the help to stderr and returns exitUsage.
func usageError(fs *flag.FlagSet, stderr io.Writer, format string, a ...any) int {
	fmt.Fprintf(stderr, "%s: %s\n", fs.Name(), fmt.Sprintf(format, a...))
	usageHint(fs, stderr)
	return exitUsage
}

// usageHint prints the first line of the usage (the synopsis) and where the full help is.
func usageHint(fs *flag.FlagSet, w io.Writer) {
	var full strings.Builder
	out := fs.Output()
	fs.SetOutput(&full)
	fs.Usage()
	fs.SetOutput(out)
	first, _, _ := strings.Cut(full.String(), "\n")
	fmt.Fprintf(w, "%s\nRun '%s --help' for the flags.\n", first, fs.Name())
}

// signalContext ends on Ctrl-C (SIGINT) or SIGTERM.
func signalContext() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
}
