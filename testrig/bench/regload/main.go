// Command regload fills a termserver's device registry as issue 22
// measured it: n anonymous devices, each saying as much about itself as
// connect lets it (32 tags, 32 capabilities, 128-byte fields, all "<",
// which an HTML-escaping encoder writes as 6 bytes) and, with -screen, a
// 64x256 screen. With -hold it keeps the connections open until stdin
// closes; otherwise each device disconnects once connected.
//
//	regload -url ws://127.0.0.1:8080/api/channels/terminal-dev/ws -n 2000 -conc 50
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"
)

func main() {
	url := flag.String("url", "ws://127.0.0.1:8080/api/channels/terminal-dev/ws", "device WebSocket URL")
	n := flag.Int("n", 2000, "devices")
	conc := flag.Int("conc", 50, "devices connecting at once")
	prefix := flag.String("prefix", "load", "peer_id prefix")
	screen := flag.Bool("screen", false, "send a 64x256 screen after connected")
	hold := flag.Bool("hold", false, "keep the connections open until stdin closes")
	flag.Parse()

	lt := strings.Repeat("<", 128)
	tags := map[string]string{}
	for i := range 32 {
		tags[fmt.Sprintf("%02d%s", i, strings.Repeat("k", 62))] = lt
	}
	var caps []string
	for i := range 32 {
		caps = append(caps, fmt.Sprintf("%02d%s", i, strings.Repeat("<", 126)))
	}
	caps[0], caps[1] = "text", "screen"
	rows := make([]string, 64)
	for i := range rows {
		rows[i] = strings.Repeat("<", 256)
	}
	var ok, refused, failed atomic.Int64
	var mu sync.Mutex
	var held []*websocket.Conn
	sem := make(chan struct{}, *conc)
	var wg sync.WaitGroup
	t0 := time.Now()
	for i := range *n {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			d := websocket.Dialer{HandshakeTimeout: 30 * time.Second}
			ws, _, err := d.Dial(*url, nil)
			if err != nil {
				failed.Add(1)
				return
			}
			ws.SetReadDeadline(time.Now().Add(60 * time.Second))
			ws.SetWriteDeadline(time.Now().Add(60 * time.Second))
			connect := map[string]any{"type": "connect", "peer_id": fmt.Sprintf("%s-%06d", *prefix, i), "device_name": lt,
				"board": lt, "version": lt, "capabilities": caps, "tags": tags}
			if err := ws.WriteJSON(connect); err != nil {
				failed.Add(1)
				ws.Close()
				return
			}
			var f struct {
				Type string `json:"type"`
				Code string `json:"code"`
			}
			for f.Type != "connected" && f.Type != "error" {
				_, b, err := ws.ReadMessage()
				if err != nil {
					failed.Add(1)
					ws.Close()
					return
				}
				_ = json.Unmarshal(b, &f)
			}
			if f.Type == "error" {
				refused.Add(1)
				ws.Close()
				return
			}
			ok.Add(1)
			if *screen {
				_ = ws.WriteJSON(map[string]any{"type": "screen", "rows": rows, "backlight": true})
			}
			if *hold {
				mu.Lock()
				held = append(held, ws)
				mu.Unlock()
				return
			}
			time.Sleep(50 * time.Millisecond) // let the screen be taken
			ws.WriteMessage(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""))
			ws.Close()
		}()
	}
	wg.Wait()
	fmt.Printf("connected=%d refused=%d failed=%d took=%s\n", ok.Load(), refused.Load(), failed.Load(), time.Since(t0).Round(time.Millisecond))
	if *hold {
		fmt.Println("holding; close stdin to end")
		_, _ = bufio.NewReader(os.Stdin).ReadString(0)
		for _, ws := range held {
			ws.Close()
		}
	}
}
