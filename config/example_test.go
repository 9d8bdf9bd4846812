package config_test

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/ovbus/ovbus/config"
)

// Load the stack with a system file, a variable and a flag. A real program
// passes no LookupEnv, so the process environment is used.
func ExampleLoad() {
	dir, _ := os.MkdirTemp("", "ovbus-example")
	defer os.RemoveAll(dir)
	system := filepath.Join(dir, "mycroft.conf")
	os.WriteFile(system, []byte(`// the system file
{"websocket": {"host": "0.0.0.0", "max_msg_size": 50}}`), 0o644)

	env := map[string]string{
		"HOME":                     dir,
		"XDG_CONFIG_DIRS":          filepath.Join(dir, "xdg"),
		"MYCROFT_SYSTEM_CONFIG":    system,
		"OVOS_DISTRIBUTION_CONFIG": filepath.Join(dir, "none.conf"),
		"OVOS_BUS_PORT":            "8282",
	}
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	flags := config.RegisterFlags(fs)
	fs.Parse([]string{"--log-level", "debug"})

	cfg, prov, err := config.Load(config.LoadOptions{
		LookupEnv: func(k string) (string, bool) { v, ok := env[k]; return v, ok },
		Flags:     flags,
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(cfg.Address(), cfg.Bus.Route, cfg.Bus.MaxMsgSize, cfg.LogLevel)
	fmt.Println("port from", prov.Source("port"))
	fmt.Println("route from", prov.Source("route"))
	fmt.Println("log_level from", prov.Source("log_level"))
	// Output:
	// 0.0.0.0:8282 /core 52428800 DEBUG
	// port from env OVOS_BUS_PORT
	// route from default (bundled)
	// log_level from flag --log-level
}

// A bad value names the file, line, column and key.
func ExampleError() {
	dir, _ := os.MkdirTemp("", "ovbus-example")
	defer os.RemoveAll(dir)
	system := filepath.Join(dir, "mycroft.conf")
	os.WriteFile(system, []byte("{\n  \"websocket\": {\n    \"port\": \"abc\"\n  }\n}\n"), 0o644)
	env := map[string]string{"HOME": dir, "XDG_CONFIG_DIRS": dir, "MYCROFT_SYSTEM_CONFIG": system,
		"OVOS_DISTRIBUTION_CONFIG": filepath.Join(dir, "none.conf")}
	_, _, err := config.Load(config.LoadOptions{
		LookupEnv: func(k string) (string, bool) { v, ok := env[k]; return v, ok },
	})
	fmt.Println(err.(*config.Error).Line, err.(*config.Error).Key, err.(*config.Error).Msg)
	// Output:
	// 3 websocket.port expected an integer 0-65535, got "abc"
}
