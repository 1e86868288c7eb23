package fdbudget_test

import (
	"fmt"

	"termlink/server/fdbudget"
)

func Example() {
	b := fdbudget.New(1024) // in termserver: fdbudget.FromProcess()
	sockets, files := b.Pool(fdbudget.Sockets), b.Pool(fdbudget.Files)
	n := 0
	for sockets.TryAcquire(1) { // connections fill what they may
		n++
	}
	fmt.Println("sockets:", n)
	fmt.Println("a session file still opens:", files.TryAcquire(1))
	sockets.Release(n)
	// Output:
	// sockets: 885
	// a session file still opens: true
}
