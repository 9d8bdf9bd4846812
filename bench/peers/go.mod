module github.com/ovbus/ovbus/bench/peers

go 1.26

require (
	github.com/coder/websocket v1.8.15
	github.com/gobwas/ws v1.5.0
	github.com/gorilla/websocket v1.5.3
	github.com/lxzan/gws v1.8.9
)

require (
	github.com/dolthub/maphash v0.1.0 // indirect
	github.com/gobwas/httphead v0.1.0 // indirect
	github.com/klauspost/compress v1.17.9 // indirect
)

replace github.com/ovbus/ovbus/ws => ../../ws
