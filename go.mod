module termlink

go 1.24

require (
	github.com/cenkalti/backoff/v4 v4.3.0 // indirect
	github.com/gorilla/websocket v1.5.3 // indirect
)
