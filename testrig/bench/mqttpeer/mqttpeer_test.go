package main

import (
	"bufio"
	"context"
	"math"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/eclipse/paho.mqtt.golang/packets"
)

func TestAnswer(t *testing.T) {
	topic, p, err := answer(nil, "dev/bench-7/req", []byte("ab12-3 hello there"))
	if err != nil {
		t.Fatal(err)
	}
	if topic != "dev/bench-7/rep" || string(p) != "ab12-3 You said: hello there" {
		t.Fatalf("answer = %q %q", topic, p)
	}
	// An empty text is still a message.
	if _, p, err := answer(nil, "dev/x/req", []byte("id ")); err != nil || string(p) != "id You said: " {
		t.Fatalf("empty text: %q %v", p, err)
	}
	for _, c := range []struct{ topic, payload, want string }{
		{"dev/x/rep", "a b", "not a request topic"},
		{"other/x/req", "a b", "not a request topic"},
		{"dev//req", "a b", "device id empty"},
		{"dev/a/b/req", "a b", "with a /"},
		{"dev/" + strings.Repeat("x", maxIDBytes+1) + "/req", "a b", "device id of 129 bytes"},
		{"dev/x/req", "noSpace", "no space after the message id"},
		{"dev/x/req", " text", "no message id"},
		{"dev/x/req", strings.Repeat("i", maxIDBytes+1) + " t", "message id of 129 bytes"},
	} {
		_, _, err := answer(nil, c.topic, []byte(c.payload))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("answer(%.40q, %q): err %v, want one saying %q", c.topic, c.payload, err, c.want)
		}
	}
}

func TestParseReply(t *testing.T) {
	req := appendRequest(nil, messageID("run1", 42), "hi")
	_, rep, err := answer(nil, requestTopic("d-1"), req)
	if err != nil {
		t.Fatal(err)
	}
	n, ours, err := parseReply("run1", rep)
	if err != nil || !ours || n != 42 {
		t.Fatalf("parseReply(%q) = %d %v %v, want 42 true nil", rep, n, ours, err)
	}
	if _, ours, err := parseReply("run2", rep); err != nil || ours {
		t.Fatalf("another run's reply: ours %v err %v, want false nil", ours, err)
	}
	for _, c := range []struct{ payload, want string }{
		{"run1-1 hi", "does not start with"},
		{"run1-x You said: hi", "bad sequence number"},
		{"run1--3 You said: hi", "bad sequence number"},
		{"nospace", "no space"},
	} {
		if _, _, err := parseReply("run1", []byte(c.payload)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("parseReply(%q): err %v, want one saying %q", c.payload, err, c.want)
		}
	}
}

func TestResponderHandle(t *testing.T) {
	r := &responder{log: discardLogger()}
	q := newReplyQueue()
	r.handle(q, "dev/d/req", []byte("m-1 one"))
	r.handle(q, "dev/d/rep", []byte("m-2 two")) // not a request: dropped
	r.handle(q, "dev/e/req", []byte("m-3 three"))
	got, err := q.take(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].topic != "dev/d/rep" || string(got[0].payload) != "m-1 You said: one" ||
		got[1].topic != "dev/e/rep" || string(got[1].payload) != "m-3 You said: three" {
		t.Fatalf("queued %+v", got)
	}
	if r.bad.Load() != 1 {
		t.Fatalf("bad = %d, want 1", r.bad.Load())
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := q.take(ctx, got); err == nil {
		t.Fatal("take on an empty queue with a cancelled context: no error")
	}
}

// TestDeviceHandle feeds a device the packets a broker sends: a PUBACK
// acks the message its packet id was given to, a QoS 1 reply is
// answered with a PUBACK of its packet id and completes its message, a
// reply of another run is counted stale, junk is counted bad.
func TestDeviceHandle(t *testing.T) {
	l, err := newLoader(loadOptions{devices: 1, rate: 10, duration: time.Second, prefix: "t", text: "x"}, discardLogger())
	if err != nil {
		t.Fatal(err)
	}
	devEnd, brokerEnd := net.Pipe()
	defer devEnd.Close()
	defer brokerEnd.Close()
	d := l.devs[0]
	d.conn = devEnd
	d.alive.Store(true)

	pub := packets.NewControlPacket(packets.Publish).(*packets.PublishPacket)
	pub.Qos = 1
	pub.TopicName, pub.Payload = requestTopic(d.id), appendRequest(nil, messageID(l.run, 3), "x")
	go l.sendMessage(d, pub, 3)
	got, err := packets.ReadPacket(brokerEnd)
	if err != nil {
		t.Fatal(err)
	}
	gp, ok := got.(*packets.PublishPacket)
	if !ok || gp.Qos != 1 || gp.TopicName != "dev/t-0/req" || string(gp.Payload) != l.run+"-3 x" || gp.MessageID == 0 {
		t.Fatalf("device wrote %v", got)
	}

	ack := packets.NewControlPacket(packets.Puback).(*packets.PubackPacket)
	ack.MessageID = gp.MessageID
	if err := l.handle(d, ack, time.Now()); err != nil {
		t.Fatal(err)
	}
	if l.track.acked.Load() != 1 || len(d.pending) != 0 {
		t.Fatalf("acked %d, pending %v after the PUBACK", l.track.acked.Load(), d.pending)
	}

	rep := packets.NewControlPacket(packets.Publish).(*packets.PublishPacket)
	rep.Qos, rep.MessageID, rep.TopicName = 1, 777, replyTopic(d.id)
	_, rep.Payload, _ = answer(nil, gp.TopicName, gp.Payload)
	errc := make(chan error, 1)
	go func() { errc <- l.handle(d, rep, time.Now()) }()
	got, err = packets.ReadPacket(brokerEnd)
	if err != nil {
		t.Fatal(err)
	}
	if pa, ok := got.(*packets.PubackPacket); !ok || pa.MessageID != 777 {
		t.Fatalf("device answered the reply with %v, want PUBACK 777", got)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if l.track.replied.Load() != 1 || l.track.outstanding() != 0 {
		t.Fatalf("replied %d outstanding %d", l.track.replied.Load(), l.track.outstanding())
	}

	stale := packets.NewControlPacket(packets.Publish).(*packets.PublishPacket) // QoS 0: no PUBACK
	stale.TopicName, stale.Payload = replyTopic(d.id), []byte("otherrun-3 You said: x")
	bad := packets.NewControlPacket(packets.Publish).(*packets.PublishPacket)
	bad.TopicName, bad.Payload = replyTopic(d.id), []byte("garbage")
	for _, p := range []packets.ControlPacket{stale, bad, packets.NewControlPacket(packets.Pingresp), packets.NewControlPacket(packets.Suback)} {
		if err := l.handle(d, p, time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	if l.stale.Load() != 1 || l.badPackets.Load() != 1 || l.pongs.Load() != 1 || l.unexpected.Load() != 1 || l.track.replied.Load() != 1 {
		t.Fatalf("stale %d bad %d pongs %d unexpected %d replied %d, want 1 1 1 1 1",
			l.stale.Load(), l.badPackets.Load(), l.pongs.Load(), l.unexpected.Load(), l.track.replied.Load())
	}
}

// fakeBroker accepts MQTT connections on 127.0.0.1:0 and does the
// broker's and the responder's part: CONNACK, SUBACK, and for each QoS 1
// request a PUBACK and the reply at QoS 1.
func fakeBroker(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				serveFake(t, c)
			}()
		}
	}()
	return ln.Addr().String()
}

func serveFake(t *testing.T, c net.Conn) {
	br := bufio.NewReader(c)
	var pid uint16
	for {
		p, err := packets.ReadPacket(br)
		if err != nil {
			return
		}
		var out []packets.ControlPacket
		switch p := p.(type) {
		case *packets.ConnectPacket:
			if p.ProtocolVersion != 4 || p.CleanSession || p.Keepalive == 0 {
				t.Errorf("CONNECT %v: want MQTT 3.1.1, a persistent session, a keepalive", p)
			}
			out = append(out, packets.NewControlPacket(packets.Connack))
		case *packets.SubscribePacket:
			sa := packets.NewControlPacket(packets.Suback).(*packets.SubackPacket)
			sa.MessageID, sa.ReturnCodes = p.MessageID, []byte{1}
			out = append(out, sa)
		case *packets.PublishPacket:
			a := packets.NewControlPacket(packets.Puback).(*packets.PubackPacket)
			a.MessageID = p.MessageID
			rep := packets.NewControlPacket(packets.Publish).(*packets.PublishPacket)
			var err error
			rep.TopicName, rep.Payload, err = answer(nil, p.TopicName, p.Payload)
			if err != nil {
				t.Errorf("request: %v", err)
				return
			}
			pid++
			rep.Qos, rep.MessageID = 1, pid
			out = append(out, a, rep)
		case *packets.PingreqPacket:
			out = append(out, packets.NewControlPacket(packets.Pingresp))
		case *packets.PubackPacket, *packets.DisconnectPacket:
		default:
			t.Errorf("fake broker got %v", p)
		}
		for _, o := range out {
			if err := o.Write(c); err != nil {
				return
			}
		}
	}
}

// TestLoadAgainstFakeBroker runs the generator end to end: every device
// connects and subscribes, every message sent is acked and answered.
func TestLoadAgainstFakeBroker(t *testing.T) {
	o, err := parseLoad([]string{"--broker", fakeBroker(t), "--devices", "5", "--rate", "200", "--duration", "300ms", "--drain", "1m", "--keepalive", "1s"})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := runLoad(context.Background(), o, discardLogger(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if rep.DevicesConnected != 5 || rep.Sent == 0 || rep.Acked != rep.Sent || rep.Replied != rep.Sent || rep.Lost != 0 ||
		rep.BadFrames+rep.UnknownIDs+rep.UnexpectedFrames+rep.DuplicateReplies != 0 || rep.RoundTrip.N != int(rep.Sent) {
		t.Fatalf("report %+v", rep)
	}
}

func TestParseLoadErrors(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{nil, "--broker is required"},
		{[]string{"--broker", "h:1", "--devices", "0"}, "want at least 1"},
		{[]string{"--broker", "h:1", "--keepalive", "1500ms"}, "whole seconds"},
		{[]string{"--broker", "h:1", "--peer-prefix", "a/b"}, "without / + #"},
		{[]string{"--broker", "h:1", "--server-pid", "1,x"}, `"x": not a pid`},
		{[]string{"--broker", "h:1", "--rate", "1e9", "--duration", "1s"}, "100 million"},
	} {
		if _, err := parseLoad(c.args); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("parseLoad(%q): err %v, want one saying %q", c.args, err, c.want)
		}
	}
}

// TestCPUMeter sums the CPU time of several pids and gives each one's
// share; a pid that is gone is a clear error in the report, not a figure.
func TestCPUMeter(t *testing.T) {
	pid := os.Getpid()
	// Two processes (the same pid twice was read at two instants: a
	// fresh-clone make test saw 310 ms against twice 160).
	other := exec.Command("sleep", "60")
	if err := other.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = other.Process.Kill(); _ = other.Wait() })
	var c cpuMeter
	c.start([]int{pid, other.Process.Pid})
	for i := 0; i < 1e6; i++ { // some CPU time; the figure is not checked against a bound
		_ = strconv.Itoa(i)
	}
	c.stop(4)
	var rep report
	c.fill(&rep)
	if rep.ServerCPUError != "" || rep.ServerCPUReplies != 4 || len(rep.ServerCPUByPID) != 2 {
		t.Fatalf("report %+v", rep)
	}
	own, slept := rep.ServerCPUByPID[strconv.Itoa(pid)], rep.ServerCPUByPID[strconv.Itoa(other.Process.Pid)]
	if math.Abs(rep.ServerCPUMs-(own+slept)) > 1e-6 {
		t.Fatalf("sum %v ms, want the pids' %v + %v ms", rep.ServerCPUMs, own, slept)
	}

	var gone cpuMeter
	gone.start([]int{pid, 1 << 30})
	gone.fill(&rep)
	if !strings.Contains(rep.ServerCPUError, "server pid 1073741824") {
		t.Fatalf("error %q, want one naming the missing pid", rep.ServerCPUError)
	}
}
