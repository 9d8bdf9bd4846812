module github.com/ovbus/ovbus/interop

go 1.26.0

require (
	github.com/chromedp/chromedp v0.23.1
	github.com/ovbus/ovbus/ws v0.0.0
)

require (
	github.com/chromedp/cdproto v0.160.1 // indirect
	github.com/go-json-experiment/json v0.0.0-20260213210345-44df1a37e875 // indirect
	github.com/klauspost/compress v1.20.4 // indirect
	golang.org/x/net v0.62.0 // indirect
	golang.org/x/text v0.43.0 // indirect
)

replace github.com/ovbus/ovbus/ws => ../ws
