package socks5

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
)

// rw is one side of an exchange: what the application sent, and what the
// proxy wrote back.
type rw struct {
	in  *bytes.Reader
	out bytes.Buffer
}

func (c *rw) Read(p []byte) (int, error)  { return c.in.Read(p) }
func (c *rw) Write(p []byte) (int, error) { return c.out.Write(p) }

func cat(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

var (
	noAuth   = []byte{Version, 1, MethodNoAuth}
	userPass = []byte{Version, 1, MethodUserPass}
	login    = []byte{AuthVersion, 5, 'a', 'l', 'i', 'c', 'e', 6, 's', '3', 'c', 'r', 'e', 't'}
	users    = map[string]string{"alice": "s3cret"}
)

func connect(atyp byte, addr ...byte) []byte {
	return append([]byte{Version, CmdConnect, 0, atyp}, addr...)
}

func TestNegotiate(t *testing.T) {
	v6 := []byte{0x20, 0x01, 0x0d, 0xb8, 15: 1, 0x01, 0xbb}
	mapped := []byte{10: 0xff, 11: 0xff, 192, 0, 2, 1, 0, 80}
	for _, tc := range []struct {
		name     string
		users    map[string]string
		in       []byte
		host     string
		port     uint16
		wantOut  []byte
		wantErr  string // "" for success
		reply    byte   // the refusal's reply code
		checkBad bool   // checkName rejects every name
	}{
		{name: "ipv4", in: cat(noAuth, connect(AtypIPv4, 192, 0, 2, 1, 0x1f, 0x90)), host: "192.0.2.1", port: 8080, wantOut: []byte{5, 0}},
		{name: "ipv6", in: cat(noAuth, connect(AtypIPv6, v6...)), host: "2001:db8::1", port: 443, wantOut: []byte{5, 0}},
		{name: "v4-mapped ipv6 unmapped", in: cat(noAuth, connect(AtypIPv6, mapped...)), host: "192.0.2.1", port: 80, wantOut: []byte{5, 0}},
		{name: "name", in: cat(noAuth, connect(AtypDomain, cat([]byte{11}, []byte("example.org"), []byte{0, 80})...)), host: "example.org", port: 80, wantOut: []byte{5, 0}},
		{name: "several methods offered", in: cat([]byte{Version, 3, 0x01, MethodUserPass, MethodNoAuth}, connect(AtypIPv4, 127, 0, 0, 1, 0, 22)), host: "127.0.0.1", port: 22, wantOut: []byte{5, 0}},
		{name: "user and password", users: users, in: cat(userPass, login, connect(AtypIPv4, 127, 0, 0, 1, 0, 22)), host: "127.0.0.1", port: 22, wantOut: []byte{5, 2, 1, 0}},

		{name: "not socks5", in: []byte{4, 1, 0, 80}, wantErr: "not a SOCKS5 client"},
		{name: "empty", in: nil, wantErr: "reading the greeting"},
		{name: "truncated methods", in: []byte{5, 3, 0}, wantErr: "reading the greeting's methods"},
		{name: "no auth offered to a proxy with users", users: users, in: noAuth, wantOut: []byte{5, 0xff}, wantErr: "no acceptable authentication method"},
		{name: "user/password offered to a proxy without", in: userPass, wantOut: []byte{5, 0xff}, wantErr: "no acceptable authentication method"},
		{name: "wrong password", users: users, in: cat(userPass, []byte{1, 5, 'a', 'l', 'i', 'c', 'e', 1, 'x'}), wantOut: []byte{5, 2, 1, 1}, wantErr: "authentication failed"},
		{name: "unknown user", users: users, in: cat(userPass, []byte{1, 3, 'b', 'o', 'b', 6, 's', '3', 'c', 'r', 'e', 't'}), wantOut: []byte{5, 2, 1, 1}, wantErr: "authentication failed"},
		{name: "auth version", users: users, in: cat(userPass, []byte{5, 0}), wantOut: []byte{5, 2, 1, 1}, wantErr: "authentication version 5"},
		{name: "truncated password", users: users, in: cat(userPass, []byte{1, 1, 'a', 4, 'x'}), wantOut: []byte{5, 2}, wantErr: "reading the password"},
		{name: "request version", in: cat(noAuth, []byte{4, CmdConnect, 0, AtypIPv4}), wantOut: []byte{5, 0}, wantErr: "request version 4", reply: ReplyFailure},
		{name: "bind", in: cat(noAuth, []byte{5, CmdBind, 0, AtypIPv4}), wantOut: []byte{5, 0}, wantErr: "BIND is not supported", reply: ReplyCmdNotSupported},
		{name: "udp associate", in: cat(noAuth, []byte{5, CmdUDPAssociate, 0, AtypIPv4}), wantOut: []byte{5, 0}, wantErr: "UDP ASSOCIATE is not supported", reply: ReplyCmdNotSupported},
		{name: "unknown command", in: cat(noAuth, []byte{5, 9, 0, AtypIPv4}), wantOut: []byte{5, 0}, wantErr: "unknown command 9", reply: ReplyCmdNotSupported},
		{name: "address type", in: cat(noAuth, []byte{5, CmdConnect, 0, 2}), wantOut: []byte{5, 0}, wantErr: "address type 2", reply: ReplyAtypNotSupported},
		{name: "truncated ipv4", in: cat(noAuth, connect(AtypIPv4, 127, 0)), wantOut: []byte{5, 0}, wantErr: "truncated address", reply: ReplyFailure},
		{name: "truncated name", in: cat(noAuth, connect(AtypDomain, 20, 'a')), wantOut: []byte{5, 0}, wantErr: "truncated name of 20 bytes", reply: ReplyFailure},
		{name: "bad name", checkBad: true, in: cat(noAuth, connect(AtypDomain, 3, 'a', ' ', 'b', 0, 80)), wantOut: []byte{5, 0}, wantErr: "bad destination name", reply: ReplyHostUnreachable},
		{name: "port 0", in: cat(noAuth, connect(AtypIPv4, 127, 0, 0, 1, 0, 0)), wantOut: []byte{5, 0}, wantErr: "destination port 0", reply: ReplyFailure},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &rw{in: bytes.NewReader(tc.in)}
			var check func(string) error
			if tc.checkBad {
				check = func(string) error { return errors.New("no names here") }
			}
			host, port, err := Negotiate(c, tc.users, check)
			if !bytes.Equal(c.out.Bytes(), tc.wantOut) {
				t.Errorf("wrote % x, want % x", c.out.Bytes(), tc.wantOut)
			}
			if tc.wantErr == "" {
				if err != nil || host != tc.host || port != tc.port {
					t.Fatalf("Negotiate = %q, %d, %v; want %q, %d", host, port, err, tc.host, tc.port)
				}
				if c.in.Len() != 0 {
					t.Errorf("%d bytes of the request left unread", c.in.Len())
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("error %v, want one with %q", err, tc.wantErr)
			}
			if !errors.Is(err, ErrRefused) {
				t.Errorf("error %v does not wrap ErrRefused", err)
			}
			var se *Error
			if !errors.As(err, &se) {
				t.Fatalf("error %v is not an *Error", err)
			}
			if se.Reply != tc.reply {
				t.Errorf("reply code %d, want %d", se.Reply, tc.reply)
			}
		})
	}
}

func TestNegotiateReadError(t *testing.T) {
	c := &rw{in: bytes.NewReader(noAuth[:1])}
	_, _, err := Negotiate(c, nil, nil)
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("error %v does not wrap the read's cause", err)
	}
}

func TestWriteReply(t *testing.T) {
	var b bytes.Buffer
	if err := WriteReply(&b, ReplyConnRefused); err != nil {
		t.Fatal(err)
	}
	if want := []byte{5, 5, 0, 1, 0, 0, 0, 0, 0, 0}; !bytes.Equal(b.Bytes(), want) {
		t.Errorf("reply % x, want % x", b.Bytes(), want)
	}
}

// FuzzNegotiate: any bytes from an application end in a non-zero port
// after a method choice, or in a refusal that wraps ErrRefused; never a
// panic.
func FuzzNegotiate(f *testing.F) {
	f.Add(cat(noAuth, connect(AtypIPv4, 127, 0, 0, 1, 0, 22)), false)
	f.Add(cat(userPass, login, connect(AtypDomain, 1, 'x', 0, 80)), true)
	f.Add(cat(noAuth, connect(AtypIPv6, make([]byte, 18)...)), false)
	f.Fuzz(func(t *testing.T, in []byte, auth bool) {
		var u map[string]string
		if auth {
			u = users
		}
		c := &rw{in: bytes.NewReader(in)}
		host, port, err := Negotiate(c, u, nil)
		switch {
		case err != nil && !errors.Is(err, ErrRefused):
			t.Fatalf("error %v does not wrap ErrRefused", err)
		case err == nil && (port == 0 || !bytes.HasPrefix(c.out.Bytes(), []byte{Version})):
			t.Fatalf("accepted %q port %d from % x, having written % x", host, port, in, c.out.Bytes())
		}
	})
}
