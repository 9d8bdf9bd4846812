package bus

import "os"

// OVBUS_TEST_PORTABLE=1 runs the package's tests on the portable reader
// (one goroutine per connection, as over TLS and on other systems) instead
// of the poller; make test runs them both ways.
func init() {
	if os.Getenv("OVBUS_TEST_PORTABLE") != "" {
		pollDisabled = true
	}
}
