package discover

import (
	"errors"
	"net"
	"slices"
	"strings"
	"testing"

	"github.com/miekg/dns"
)

// answer is the response termserver's advertiser gives (built with
// github.com/miekg/dns, the library it uses): PTR, SRV, TXT and A with
// the names compressed, and an AAAA and a record of another type.
func answer(t testing.TB, instance string) []byte {
	t.Helper()
	m := new(dns.Msg)
	m.Response = true
	m.Authoritative = true
	full := instance + "." + Service + ".local."
	hdr := func(name string, typ uint16) dns.RR_Header {
		return dns.RR_Header{Name: name, Rrtype: typ, Class: dns.ClassINET | 1<<15, Ttl: 120}
	}
	m.Answer = []dns.RR{&dns.PTR{Hdr: hdr(Service+".local.", dns.TypePTR), Ptr: full}}
	m.Extra = []dns.RR{
		&dns.SRV{Hdr: hdr(full, dns.TypeSRV), Priority: 10, Weight: 1, Port: 8443, Target: "lab1.local."},
		&dns.TXT{Hdr: hdr(full, dns.TypeTXT), Txt: []string{"txtvers=1", "path=/api/channels/terminal-dev/ws", "tls=1"}},
		&dns.A{Hdr: hdr("lab1.local.", dns.TypeA), A: net.IPv4(192, 0, 2, 7)},
		&dns.AAAA{Hdr: hdr("lab1.local.", dns.TypeAAAA), AAAA: net.ParseIP("2001:db8::7")},
		&dns.HINFO{Hdr: hdr("lab1.local.", dns.TypeHINFO), Cpu: "arm", Os: "linux"},
	}
	m.Compress = true
	b, err := m.Pack()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// The advertiser's answer parses into the records Browse uses, and the
// browser puts them together as one instance.
func TestParseResponseAdvertisersAnswer(t *testing.T) {
	rs, err := parseResponse(answer(t, `lab 1\.x`))
	if err != nil {
		t.Fatal(err)
	}
	// The label "lab 1.x": its dot escaped, its space as it is.
	inst := "lab 1\\.x." + Service + ".local."
	var types []uint16
	for _, r := range rs {
		types = append(types, r.Type)
	}
	if !slices.Equal(types, []uint16{typePTR, typeSRV, typeTXT, typeA, typeAAAA}) {
		t.Fatalf("record types %v, want PTR SRV TXT A AAAA (HINFO skipped)", types)
	}
	if rs[0].Target != inst || rs[1].Name != inst || rs[1].Target != "lab1.local." || rs[1].Port != 8443 ||
		!slices.Equal(rs[2].TXT, []string{"txtvers=1", "path=/api/channels/terminal-dev/ws", "tls=1"}) ||
		!rs[3].IP.Equal(net.IPv4(192, 0, 2, 7)) || !rs[4].IP.Equal(net.ParseIP("2001:db8::7")) {
		t.Fatalf("records %+v", rs)
	}
	b := newBrowser()
	if ask := b.add(rs); len(ask) != 0 {
		t.Fatalf("asked again for %v though every record came", ask)
	}
	if len(b.found) != 1 {
		t.Fatalf("found %+v", b.found)
	}
	f := b.found[0]
	if f.Instance != `lab 1\.x` || f.Host != "lab1.local" || f.Port != 8443 || !f.Addr.Equal(net.IPv4(192, 0, 2, 7)) || !f.TXT.TLS || f.Err != nil {
		t.Fatalf("found %+v", f)
	}
	// The same answer again adds nothing.
	b.add(rs)
	if len(b.found) != 1 {
		t.Fatalf("a repeated answer: found %d", len(b.found))
	}
}

// An instance that gave its PTR only is asked again, once, by name; its
// SRV, TXT and A coming later complete it.
func TestBrowserAsksAgainOnce(t *testing.T) {
	inst := "lab2." + Service + ".local."
	b := newBrowser()
	if ask := b.add([]record{{Name: Service + ".local.", Type: typePTR, Target: inst}}); !slices.Equal(ask, []string{inst}) {
		t.Fatalf("asked %v, want %s", ask, inst)
	}
	if ask := b.add([]record{{Name: inst, Type: typeSRV, Target: "h.local.", Port: 80}}); len(ask) != 0 {
		t.Fatalf("asked again twice: %v", ask)
	}
	b.add([]record{{Name: "H.local.", Type: typeA, IP: net.IPv4(10, 0, 0, 2)}, {Name: inst, Type: typeTXT, TXT: []string{"path=/p"}}})
	if len(b.found) != 1 || b.found[0].Instance != "lab2" || b.found[0].HostPort() != "10.0.0.2:80" {
		t.Fatalf("found %+v", b.found)
	}
	// Another service's PTR (the group is shared) is no instance.
	b.add([]record{{Name: "_http._tcp.local.", Type: typePTR, Target: "web._http._tcp.local."}})
	if _, ok := b.byName["web._http._tcp.local."]; ok {
		t.Fatal("kept another service's instance")
	}
}

func TestBuildQuery(t *testing.T) {
	q, err := buildQuery(Service+".local.", typePTR)
	if err != nil {
		t.Fatal(err)
	}
	var m dns.Msg
	if err := m.Unpack(q); err != nil {
		t.Fatal(err)
	}
	if m.Response || m.RecursionDesired || len(m.Question) != 1 || m.Question[0].Name != Service+".local." ||
		m.Question[0].Qtype != dns.TypePTR || m.Question[0].Qclass != dns.ClassINET {
		t.Fatalf("query %v", &m)
	}
	// readName's escapes come back as the octets they stand for.
	q, err = buildQuery(`lab\0321\.x.`+Service+".local.", typeANY)
	if err != nil {
		t.Fatal(err)
	}
	name, _, err := readName(q, 12)
	if err != nil || name != `lab 1\.x.`+Service+".local." {
		t.Fatalf("readName = %q, %v", name, err)
	}
	for _, bad := range []string{"a..b.", strings.Repeat("x", 64) + ".local.", strings.Repeat("abcdefg.", 32), `a\300.`} {
		if _, err := buildQuery(bad, typePTR); err == nil {
			t.Errorf("buildQuery(%q) took it", bad)
		}
	}
}

// Malformed responses: each a specific error, never a panic.
func TestParseResponseRefuses(t *testing.T) {
	good := answer(t, "lab1")
	hdr := func(flags byte, qd, an uint16) []byte {
		return []byte{0, 0, flags, 0, byte(qd >> 8), byte(qd), byte(an >> 8), byte(an), 0, 0, 0, 0}
	}
	loop := append(hdr(0x84, 0, 1), 0xc0, 12) // a name pointing at itself
	tooLong := hdr(0x84, 0, 1)
	for range 5 {
		tooLong = append(tooLong, 63)
		tooLong = append(tooLong, []byte(strings.Repeat("a", 63))...)
	}
	tooLong = append(tooLong, 0)
	for _, tt := range []struct {
		name string
		msg  []byte
		want string
	}{
		{"empty", nil, "shorter than its header"},
		{"cut short", good[:len(good)-3], "past the message's end"},
		{"a pointer loop", loop, "not before it"},
		{"a name past 255 octets", tooLong, "longer than 255 octets"},
		{"a label type 0x40", append(hdr(0x84, 0, 1), 0x40, 0), "label type 0x40"},
		{"an A record of 3 bytes", append(hdr(0x84, 0, 1), 0, 0, 1, 0, 1, 0, 0, 0, 0, 0, 3, 1, 2, 3), "3 bytes of address"},
		{"a TXT string past its record", append(hdr(0x84, 0, 1), 0, 0, 16, 0, 1, 0, 0, 0, 0, 0, 2, 5, 'a'), "past the record's end"},
		{"an update opcode", hdr(0x84|5<<3, 0, 0), "opcode 5"},
		{"more records than it holds", hdr(0x84, 0, 3), "name cut short"},
		{"too big", make([]byte, maxPacket+1), "at most 9000"},
	} {
		_, err := parseResponse(tt.msg)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: %v, want %q", tt.name, err, tt.want)
		}
	}
	if _, err := parseResponse(hdr(0x00, 0, 0)); !errors.Is(err, errNotResponse) {
		t.Errorf("a query: %v, want errNotResponse", err)
	}
}

// FuzzParseResponse: any packet gives records or an error, never a
// panic and no records beside an error; records and names stay within
// their bounds, and the browser takes whatever parses.
func FuzzParseResponse(f *testing.F) {
	f.Add(answer(f, "lab1"))
	f.Add(answer(f, `a\.b c`))
	q, _ := buildQuery(Service+".local.", typePTR)
	f.Add(q)
	f.Add([]byte{0, 0, 0x84, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0xc0, 12})
	f.Fuzz(func(t *testing.T, msg []byte) {
		rs, err := parseResponse(msg)
		if err != nil {
			if rs != nil {
				t.Fatalf("records %v with error %v", rs, err)
			}
			return
		}
		if len(rs) > maxRecords {
			t.Fatalf("%d records", len(rs))
		}
		for _, r := range rs {
			for _, n := range []string{r.Name, r.Target} {
				if len(n) > 4*maxNameLen {
					t.Fatalf("name of %d bytes", len(n))
				}
			}
			if r.Type == typeA && len(r.IP.To4()) != 4 {
				t.Fatalf("A record address %v", r.IP)
			}
		}
		newBrowser().add(rs)
	})
}
