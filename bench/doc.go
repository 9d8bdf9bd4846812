// Package bench holds the load generators behind `ovbus bench` and `ovbus
// loadtest`, and their reports.
//
// RunFanout is the OVOS message-bus benchmark (docs/protocol.md §10): M subscribers and
// one sender connect and take their greeting, warm-up messages go round,
// then the sender sends N messages back to back (or at a fixed rate), each
// carrying its send time and a sequence number in an OVOS-shaped JSON
// message, and every subscriber records receive − send. The client is built
// to stay out of the way: it reads with large buffers through package ws,
// takes the two numbers it needs with a byte scan instead of decoding JSON,
// allocates nothing per message, and reports the share of a core it used so
// that a client-bound figure is marked as a floor.
//
// RunSteady is the bus as an OVOS device uses it: N clients that all send,
// each on its own schedule at a share of a total rate (SteadyPlan), and all
// receive every frame, their own too; OVOS-like JSON with a share of large
// binary frames (SizeMix). Each frame carries its scheduled send time, so
// latency is counted from the schedule, not from when the client got round
// to sending it (no coordinated omission), and goes into a log-linear
// histogram (stats.Histogram) for p50 to p99.9; every client checks every
// sender's order (stats.Streams). The figure to read is the bus's CPU time
// per frame at that rate.
//
// RunLoad is an echo load test in the manner of ws-tool's load_test: C
// connections, a payload size, a count or a duration, and a window of
// messages in flight per connection. With a window above 1 a connection is
// one goroutine that refills the window after every echo and writes the
// refill in one system call when it next waits for echoes, as a pipelining
// client does, so that the client's cost per message stays well below the
// server's.
//
// FanoutSuite, SteadySuite and LoadSuite run scenarios against several servers, repeated
// and interleaved (Schedule), and produce a Report: a table (text or
// markdown), JSON, headline ratios of the first server to the best other
// one, and an SVG chart (WriteSVG). The statistics follow the upstream
// benchmark's definitions; they live in package bench/stats.
//
// Nothing here asserts a speed: the tests check that every count adds up.
package bench
