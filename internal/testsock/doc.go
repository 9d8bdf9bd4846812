// Package testsock looks into sockets for tests: what the kernel holds
// that the program has not read yet (Linux only).
package testsock
