package readiness

// Readable is what a Handle calls when its socket has something to read
// (Register), and Expired what a Timer calls when its deadline has passed
// (Wheel.Init): an interface, not a func, so that an owner that is both
// (a connection) gives its pointer and no closure is made for either.
type (
	Readable interface{ Readable() }
	Expired  interface{ Expired() }
)

// Func is a func as a Readable or an Expired.
type Func func()

func (f Func) Readable() { f() }
func (f Func) Expired()  { f() }
