module termlink

go 1.26.0

require (
	github.com/cenkalti/backoff/v4 v4.3.0
	github.com/coder/acp-go-sdk v0.13.5
	github.com/creack/pty v1.1.24
	github.com/gorilla/websocket v1.5.3
	github.com/hashicorp/mdns v1.0.5
	github.com/miekg/dns v1.1.41
	go.bug.st/serial v1.8.0
	golang.org/x/sys v0.49.0
	periph.io/x/conn/v3 v3.7.2
	periph.io/x/devices/v3 v3.7.4
	periph.io/x/host/v3 v3.8.5
)

require golang.org/x/net v0.62.0 // indirect
