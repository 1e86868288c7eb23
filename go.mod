module termlink

go 1.26.0

require github.com/gorilla/websocket v1.5.3

require (
	github.com/cenkalti/backoff/v4 v4.3.0 // indirect
	github.com/creack/goselect v0.1.2 // indirect
	github.com/creack/pty v1.1.24 // indirect
	go.bug.st/serial v1.8.0 // indirect
	golang.org/x/sys v0.49.0 // indirect
	periph.io/x/conn/v3 v3.7.2 // indirect
	periph.io/x/devices/v3 v3.7.4 // indirect
	periph.io/x/host/v3 v3.8.5 // indirect
)
