package guard

import "testing"

func TestIsLoopbackAddr(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:80": true, "127.255.0.9:1": true, "[::1]:8080": true, "[::ffff:127.0.0.1]:80": true,
		"192.0.2.2:80": false, "[::2]:80": false, "10.0.0.1:5": false, "0.0.0.0:80": false, "localhost:80": false,
		"": false, "garbage": false,
	} {
		if got := isLoopbackAddr(addr); got != want {
			t.Errorf("isLoopbackAddr(%q) = %v, want %v", addr, got, want)
		}
	}
}
