module github.com/ovbus/ovbus/ws

go 1.26.0

require (
	github.com/klauspost/compress v1.20.4
	golang.org/x/net v0.62.0
)

require golang.org/x/text v0.43.0 // indirect
