package discover

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
)

// The few DNS messages (RFC 1035) a DNS-SD browse needs, encoded and
// parsed by hand: one PTR question out; PTR, SRV, TXT, A and AAAA records
// in. A general DNS library (github.com/miekg/dns, through
// github.com/hashicorp/mdns) was about 500 KB of termd for ARMv6.

// DNS record types and the class Browse reads.
const (
	typeA    = 1
	typePTR  = 12
	typeTXT  = 16
	typeAAAA = 28
	typeSRV  = 33
	typeANY  = 255
	classIN  = 1
)

// Bounds of what parseResponse accepts.
const (
	maxNameLen  = 255  // octets of a name in wire form (RFC 1035 §2.3.4)
	maxPointers = 32   // compression pointers followed in one name
	maxPacket   = 9000 // the largest mDNS message (RFC 6762 §17)
	maxRecords  = 256
)

// record is one resource record Browse uses; the others are skipped.
type record struct {
	Name   string // the owner name, "lab1._termlink._tcp.local."
	Type   uint16
	Target string   // PTR: the name pointed to; SRV: the target host
	Port   uint16   // SRV
	TXT    []string // TXT: its character-strings
	IP     net.IP   // A, AAAA
}

// errNotResponse is a message that is a query (Browse hears its own, and
// other hosts', on the multicast group): no error worth reporting.
var errNotResponse = errors.New("a DNS query, not a response")

// buildQuery is a DNS message with one question for name (fully
// qualified, with its trailing dot) of type qtype, class IN, id 0 and no
// recursion desired, as mDNS asks (RFC 6762 §18).
func buildQuery(name string, qtype uint16) ([]byte, error) {
	msg := make([]byte, 12, 12+len(name)+2+4)
	binary.BigEndian.PutUint16(msg[4:], 1) // QDCOUNT
	msg, err := appendName(msg, name)
	if err != nil {
		return nil, err
	}
	msg = binary.BigEndian.AppendUint16(msg, qtype)
	msg = binary.BigEndian.AppendUint16(msg, classIN)
	return msg, nil
}

// appendName appends name ("a.b.c.", dots separating labels; "\." is a
// dot inside a label, "\DDD" the octet DDD: readName's escapes) in wire
// form, uncompressed.
func appendName(msg []byte, name string) ([]byte, error) {
	name = strings.TrimSuffix(name, ".")
	start := len(msg)
	for name != "" {
		var label []byte
		i := 0
		for ; i < len(name) && name[i] != '.'; i++ {
			if name[i] == '\\' && i+3 < len(name) && isDigits(name[i+1:i+4]) {
				n, _ := strconv.Atoi(name[i+1 : i+4])
				if n > 255 {
					return nil, fmt.Errorf("DNS name %q: escape \\%s past 255", name, name[i+1:i+4])
				}
				label = append(label, byte(n))
				i += 3
				continue
			}
			if name[i] == '\\' && i+1 < len(name) {
				i++
			}
			label = append(label, name[i])
		}
		if len(label) == 0 || len(label) > 63 {
			return nil, fmt.Errorf("DNS name %q: a label of %d octets (1-63)", name, len(label))
		}
		msg = append(append(msg, byte(len(label))), label...)
		name = name[min(i+1, len(name)):]
	}
	msg = append(msg, 0)
	if len(msg)-start > maxNameLen {
		return nil, fmt.Errorf("DNS name of %d octets (at most %d)", len(msg)-start, maxNameLen)
	}
	return msg, nil
}

// parseResponse reads a DNS response's records (answers, authority and
// additional records) of the types Browse uses; records of other types
// or classes are skipped. A malformed message is an error naming what is
// wrong; a query is errNotResponse. What it allocates is bounded: a
// message of at most maxPacket bytes, at most maxRecords records kept,
// a name at most maxNameLen octets (4 times that as text, escaped).
func parseResponse(msg []byte) ([]record, error) {
	if len(msg) > maxPacket {
		return nil, fmt.Errorf("DNS message of %d bytes (at most %d)", len(msg), maxPacket)
	}
	if len(msg) < 12 {
		return nil, fmt.Errorf("DNS message of %d bytes: shorter than its header", len(msg))
	}
	if msg[2]&0x80 == 0 {
		return nil, errNotResponse
	}
	if op := msg[2] >> 3 & 0xf; op != 0 {
		return nil, fmt.Errorf("DNS message with opcode %d (want 0, a query's response)", op)
	}
	qd := int(binary.BigEndian.Uint16(msg[4:]))
	rrs := int(binary.BigEndian.Uint16(msg[6:])) + int(binary.BigEndian.Uint16(msg[8:])) + int(binary.BigEndian.Uint16(msg[10:]))
	off := 12
	for i := range qd {
		_, next, err := readName(msg, off)
		if err != nil {
			return nil, fmt.Errorf("DNS question %d: %w", i+1, err)
		}
		if next+4 > len(msg) {
			return nil, fmt.Errorf("DNS question %d: cut short", i+1)
		}
		off = next + 4
	}
	var out []record
	for i := range rrs {
		name, next, err := readName(msg, off)
		if err != nil {
			return nil, fmt.Errorf("DNS record %d: its name: %w", i+1, err)
		}
		if next+10 > len(msg) {
			return nil, fmt.Errorf("DNS record %d (%s): cut short in its header", i+1, name)
		}
		typ := binary.BigEndian.Uint16(msg[next:])
		class := binary.BigEndian.Uint16(msg[next+2:]) &^ 0x8000 // the cache-flush bit (RFC 6762 §10.2)
		rdlen := int(binary.BigEndian.Uint16(msg[next+8:]))
		rdata := next + 10
		end := rdata + rdlen
		if end > len(msg) {
			return nil, fmt.Errorf("DNS record %d (%s): data of %d bytes past the message's end", i+1, name, rdlen)
		}
		off = end
		if class != classIN {
			continue
		}
		r := record{Name: name, Type: typ}
		switch typ {
		case typePTR:
			target, n, err := readName(msg, rdata)
			if err != nil || n != end {
				return nil, fmt.Errorf("DNS PTR record %d (%s): %w", i+1, name, orLength(err))
			}
			r.Target = target
		case typeSRV:
			if rdlen < 7 {
				return nil, fmt.Errorf("DNS SRV record %d (%s): %d bytes of data", i+1, name, rdlen)
			}
			r.Port = binary.BigEndian.Uint16(msg[rdata+4:])
			target, n, err := readName(msg, rdata+6)
			if err != nil || n != end {
				return nil, fmt.Errorf("DNS SRV record %d (%s): %w", i+1, name, orLength(err))
			}
			r.Target = target
		case typeTXT:
			for p := rdata; p < end; {
				l := int(msg[p])
				if p+1+l > end {
					return nil, fmt.Errorf("DNS TXT record %d (%s): a string past the record's end", i+1, name)
				}
				r.TXT = append(r.TXT, string(msg[p+1:p+1+l]))
				p += 1 + l
			}
		case typeA:
			if rdlen != net.IPv4len {
				return nil, fmt.Errorf("DNS A record %d (%s): %d bytes of address", i+1, name, rdlen)
			}
			r.IP = net.IPv4(msg[rdata], msg[rdata+1], msg[rdata+2], msg[rdata+3])
		case typeAAAA:
			if rdlen != net.IPv6len {
				return nil, fmt.Errorf("DNS AAAA record %d (%s): %d bytes of address", i+1, name, rdlen)
			}
			r.IP = append(net.IP(nil), msg[rdata:end]...)
		default:
			continue
		}
		if len(out) == maxRecords {
			return nil, fmt.Errorf("DNS message with more than %d records of the types a browse reads", maxRecords)
		}
		out = append(out, r)
	}
	return out, nil
}

func isDigits(s string) bool {
	for _, c := range []byte(s) {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

func orLength(err error) error {
	if err != nil {
		return err
	}
	return errors.New("its name does not fill its data")
}

// readName reads the (possibly compressed) name at off and returns it as
// text with a trailing dot, and the offset just past it where it starts.
// A label's "." and "\" are escaped with "\", other octets outside
// printable ASCII as "\DDD" (as in zone files). Compression pointers may
// only point backwards, at most maxPointers of them; the name is at most
// maxNameLen octets in wire form.
func readName(msg []byte, off int) (string, int, error) {
	var b strings.Builder
	next := -1
	wire := 0
	for ptrs := 0; ; {
		if off >= len(msg) {
			return "", 0, errors.New("name cut short")
		}
		l := int(msg[off])
		switch l & 0xc0 {
		case 0xc0:
			if off+1 >= len(msg) {
				return "", 0, errors.New("name cut short in a compression pointer")
			}
			to := (l&0x3f)<<8 | int(msg[off+1])
			if next < 0 {
				next = off + 2
			}
			if to >= off {
				return "", 0, fmt.Errorf("name's compression pointer to %d, not before it (%d)", to, off)
			}
			if ptrs++; ptrs > maxPointers {
				return "", 0, fmt.Errorf("name with more than %d compression pointers", maxPointers)
			}
			off = to
			continue
		case 0x00:
		default:
			return "", 0, fmt.Errorf("name with a label type 0x%02x", l&0xc0)
		}
		wire += 1 + l
		if wire > maxNameLen {
			return "", 0, fmt.Errorf("name longer than %d octets", maxNameLen)
		}
		if l == 0 {
			if next < 0 {
				next = off + 1
			}
			if b.Len() == 0 {
				b.WriteByte('.')
			}
			return b.String(), next, nil
		}
		if off+1+l > len(msg) {
			return "", 0, errors.New("name's label cut short")
		}
		for _, c := range msg[off+1 : off+1+l] {
			switch {
			case c == '.' || c == '\\':
				b.WriteByte('\\')
				b.WriteByte(c)
			case c < 0x20 || c > 0x7e:
				b.WriteByte('\\')
				s := strconv.Itoa(int(c))
				b.WriteString(strings.Repeat("0", 3-len(s)) + s)
			default:
				b.WriteByte(c)
			}
		}
		b.WriteByte('.')
		off += 1 + l
	}
}
