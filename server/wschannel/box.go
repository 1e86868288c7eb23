package wschannel

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/gorilla/websocket"
)

// An idle connection holds no *websocket.Conn. Reading and writing
// frames takes a wsBox: a gorilla Conn (352 bytes, its 96-byte lock
// channel and its handlers' closures) with the read buffer gorilla reads
// through (readBufferBytes). The Conn's socket is the box itself, which
// passes every call on to the connection it serves at the time (its
// flushConn), and its ping and close handlers call that connection; so a
// box serves any connection, one at a time. A connection holds its box
// while its reader steps (from a wake to its arming in the poller: not
// while it waits there) or its writer runs, and gives it back to boxes
// when neither does and nothing is buffered (bindLocked, unbindLocked);
// the next wake or write takes one again. Between messages a Conn holds
// nothing of the connection's: no frame half read (the reader reads whole
// messages), no writer (each write is a whole message), no write buffer
// (writeBufferPool), no error (a failed read or write ends the
// connection: it keeps its box to the end). Its read limit is the one
// setting that differs between connections; bind sets it.
//
// A box's read buffer is readBufferBytes (448): the 448-byte size class,
// not the one each connection's wsConn is in (TestConnStructSize). The
// boxes come and go with the pool (a collection drops the ones not
// used), and buffers of the wsConns' class would leave holes among them
// that keep their pages resident (TestBoxSizeClasses).
//
// A connection takes its first box at its upgrade (upgrade.go); boxes
// are made by an upgrade of no connection (newBox) when boxes is empty. A
// connection without a poller (serve) keeps its box.
type wsBox struct {
	ws    *websocket.Conn
	nc    *flushConn // the connection served; nil: none (writes are discarded)
	owner *wsConn
	br    bufio.Reader // gorilla's read buffer (the Conn reads through it)
}

// boxes are the boxes no connection holds (getBox).
var boxes sync.Pool

// getBox takes a box from boxes, or makes one.
func getBox() *wsBox {
	if b, ok := boxes.Get().(*wsBox); ok {
		return b
	}
	return newBox()
}

// newBox makes a box by an upgrade of no connection (boxUpgrader).
func newBox() *wsBox {
	b := &wsBox{}
	b.br = *bufio.NewReaderSize(b, readBufferBytes)
	ws, err := boxUpgrader.Upgrade(boxHijacker{b}, boxRequest, nil)
	if err != nil { // cannot happen: the request is a valid upgrade
		panic("wschannel: an upgrade of no connection failed: " + err.Error())
	}
	b.setConn(ws)
	return b
}

// setConn takes ws, the Conn gorilla made over b, and hands its ping and
// close frames to the connection b serves.
func (b *wsBox) setConn(ws *websocket.Conn) {
	b.ws = ws
	// WebSocket-level pings and closes are answered by the writer too.
	ws.SetPingHandler(func(data string) error {
		b.owner.enqueue(outFrame{data: []byte(data), kind: pongControl})
		return nil
	})
	ws.SetCloseHandler(func(code int, _ string) error {
		b.owner.peerClosed(code)
		return nil
	})
}

// boxUpgrader makes newBox's Conns with the settings a device's has
// (upgrade.go): no subprotocol, no compression, reads through the box's
// buffer (ReadBufferSize 0), writes through writeBufferPool.
var (
	boxUpgrader = websocket.Upgrader{WriteBufferPool: writeBufferPool, CheckOrigin: func(*http.Request) bool { return true }}
	// boxRequest is a valid upgrade request (only read by gorilla).
	boxRequest = &http.Request{Method: http.MethodGet, Header: http.Header{
		"Connection": {"Upgrade"}, "Upgrade": {"websocket"}, "Sec-Websocket-Version": {"13"},
		"Sec-Websocket-Key": {"dGhlIHNhbXBsZSBub25jZQ=="},
	}}
)

// boxHijacker is the response of newBox's upgrade: the box is the
// hijacked connection.
type boxHijacker struct{ b *wsBox }

func (h boxHijacker) Header() http.Header         { return http.Header{} }
func (h boxHijacker) Write(p []byte) (int, error) { return len(p), nil }
func (h boxHijacker) WriteHeader(int)             {}
func (h boxHijacker) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	return h.b, bufio.NewReadWriter(&h.b.br, bufio.NewWriterSize(io.Discard, 256)), nil
}

// The box is the Conn's net.Conn: every call goes to the connection
// served. Without one (newBox's upgrade) writes are discarded.

func (b *wsBox) Read(p []byte) (int, error) {
	if b.nc == nil {
		return 0, io.EOF
	}
	return b.nc.Read(p)
}

func (b *wsBox) Write(p []byte) (int, error) {
	if b.nc == nil {
		return len(p), nil
	}
	return b.nc.Write(p)
}

func (b *wsBox) Close() error {
	if b.nc == nil {
		return nil
	}
	return b.nc.Close()
}

func (b *wsBox) LocalAddr() net.Addr {
	if b.nc == nil {
		return nil
	}
	return b.nc.LocalAddr()
}

func (b *wsBox) RemoteAddr() net.Addr {
	if b.nc == nil {
		return nil
	}
	return b.nc.RemoteAddr()
}

func (b *wsBox) SetDeadline(t time.Time) error {
	if b.nc == nil {
		return nil
	}
	return b.nc.SetDeadline(t)
}

func (b *wsBox) SetReadDeadline(t time.Time) error {
	if b.nc == nil {
		return nil
	}
	return b.nc.SetReadDeadline(t)
}

func (b *wsBox) SetWriteDeadline(t time.Time) error {
	if b.nc == nil {
		return nil
	}
	return b.nc.SetWriteDeadline(t)
}

// bindLocked gives c a box if it has none (c.mu held; the reader is
// about to step or a writer to run).
func (c *wsConn) bindLocked() {
	if c.box != nil {
		return
	}
	b := getBox()
	b.nc, b.owner = &c.nc, c
	b.br.Reset(b)
	b.ws.SetReadLimit(c.readLimit())
	c.box = b
	c.a.parked.Add(-1)
}

// unbindLocked gives c's box back when neither the reader nor a writer
// holds it and the connection is open (c.mu held; nothing is buffered:
// the reader arms the poller only then). A closing connection keeps its
// box: its Conn may hold an error, and the close is written and read
// through it.
func (c *wsConn) unbindLocked() {
	b := c.box
	if b == nil || c.readerHolds || c.writing || c.state >= connClosing || c.readerEnd || b.br.Buffered() != 0 {
		return
	}
	c.box = nil
	b.nc, b.owner = nil, nil
	boxes.Put(b)
	c.a.parked.Add(1)
}

// ws is the connection's Conn: only the reader (while it holds the box)
// and the writer (while one runs) call it.
func (c *wsConn) ws() *websocket.Conn { return c.box.ws }
