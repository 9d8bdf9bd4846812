module github.com/ovbus/ovbus

go 1.26
