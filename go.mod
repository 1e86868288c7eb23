module termlink

go 1.24

require github.com/gorilla/websocket v1.5.3
