module termlink

go 1.26.0

require github.com/gorilla/websocket v1.5.3

require golang.org/x/sys v0.49.0 // indirect
