// Command enrollflood reproduces issue 22 row 3 (enrollment locked
// without credentials) against a running termserver with enrollment on
// channel terminal-dev and an operator token (enroll-lock.sh runs it).
//
//	enrollflood -server http://127.0.0.1:PORT -token SECRET badpolls
//	enrollflood -server ... flood -n 1100        (one address per /24: 127.a.b.1)
//	enrollflood -server ... flood1 -n 250        (250 addresses of one /24: 127.0.5.x)
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sort"
	"strings"
	"sync"
	"time"
)

var server, token string

func client(addr string) *http.Client {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(addr)}, Timeout: 5 * time.Second}
	return &http.Client{Transport: &http.Transport{DialContext: d.DialContext, DisableKeepAlives: true}, Timeout: 10 * time.Second}
}

func do(c *http.Client, method, path, body, bearer string) (int, string) {
	req, _ := http.NewRequest(method, server+path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	resp, err := c.Do(req)
	if err != nil {
		return -1, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

const enrollPath = "/api/channels/terminal-dev/enroll"

type grant struct {
	Code       string `json:"code"`
	DeviceCode string `json:"device_code"`
}

func start(addr string) (int, grant) {
	st, b := do(client(addr), "POST", enrollPath, `{"device_name":"dev"}`, "")
	var g grant
	_ = json.Unmarshal([]byte(b), &g)
	return st, g
}

func pending() int {
	_, b := do(client("127.0.0.1"), "GET", "/api/enrollments", "", token)
	var l struct{ Enrollments []json.RawMessage }
	_ = json.Unmarshal([]byte(b), &l)
	return len(l.Enrollments)
}

func hist(m map[int]int) string {
	var ks []int
	for k := range m {
		ks = append(ks, k)
	}
	sort.Ints(ks)
	var s []string
	for _, k := range ks {
		s = append(s, fmt.Sprintf("%d x%d", k, m[k]))
	}
	return strings.Join(s, ", ")
}

func main() {
	flag.StringVar(&server, "server", "", "")
	flag.StringVar(&token, "token", "", "operator token")
	n := flag.Int("n", 1100, "")
	flag.Parse()
	switch flag.Arg(0) {
	case "badpolls":
		st, g := start("127.0.0.1")
		fmt.Printf("device 127.0.0.1 asks a code: %d\n", st)
		bad := map[int]int{}
		for i := 0; i < 5; i++ {
			s, _ := do(client("127.0.0.1"), "POST", enrollPath+"/token", fmt.Sprintf(`{"device_code":"guess-%d"}`, i), "")
			bad[s]++
		}
		fmt.Printf("5 bad device_code polls from 127.0.0.1: %s\n", hist(bad))
		s, b := do(client("127.0.0.1"), "POST", enrollPath+"/token", `{"device_code":"`+g.DeviceCode+`"}`, "")
		var er struct{ Error string }
		_ = json.Unmarshal([]byte(b), &er)
		fmt.Printf("the real device's poll (127.0.0.1): %d %s\n", s, er.Error)
		s, b = do(client("127.0.0.1"), "POST", "/api/enrollments/"+g.Code+"/approve", `{"peer_id":"lobby-1"}`, token)
		flat := strings.Join(strings.Fields(b), " ")
		fmt.Printf("operator approve with a valid token: %d %s\n", s, flat[:min(100, len(flat))])
		time.Sleep(2100 * time.Millisecond)
		s, _ = do(client("127.0.0.1"), "POST", enrollPath+"/token", `{"device_code":"`+g.DeviceCode+`"}`, "")
		fmt.Printf("the device collects its token: %d\n", s)
	case "flood", "flood1":
		addr := func(k int) string { return fmt.Sprintf("127.%d.%d.1", 1+k/256, k%256) }
		if flag.Arg(0) == "flood1" {
			addr = func(k int) string { return fmt.Sprintf("127.0.5.%d", 1+k%254) }
		}
		var mu sync.Mutex
		got := map[int]int{}
		jobs := make(chan int)
		var wg sync.WaitGroup
		t0 := time.Now()
		for w := 0; w < 32; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for k := range jobs {
					st, _ := start(addr(k))
					mu.Lock()
					got[st]++
					mu.Unlock()
				}
			}()
		}
		for k := 0; k < *n; k++ {
			jobs <- k
		}
		close(jobs)
		wg.Wait()
		fmt.Printf("%s: %d code requests in %.2f s: %s\n", flag.Arg(0), *n, time.Since(t0).Seconds(), hist(got))
		st, _ := start("127.200.0.1")
		fmt.Printf("a new device on 127.200.0.0/24 asks a code: %d\n", st)
		fmt.Printf("listed pending codes: %d\n", pending())
		time.Sleep(8 * time.Second)
		fmt.Printf("listed pending codes 8 s later (the flood never polled): %d\n", pending())
		st, _ = start("127.201.0.1")
		fmt.Printf("a new device on 127.201.0.0/24 asks a code: %d\n", st)
	default:
		fmt.Fprintln(os.Stderr, "usage: enrollflood -server URL -token T badpolls|flood|flood1 [-n N]")
		os.Exit(2)
	}
}
