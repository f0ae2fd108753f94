package testutil

import "encoding/binary"

// Yamux frames written by hand, for the tests and harnesses that attack a
// link's yamux session as a peer with the key would (tunnel's
// peerattack_test.go, harness/peerattack). The wire format is
// hashicorp/yamux's (const.go): a 12-byte header, version 0,
// type:u8 flags:u16be stream:u32be length:u32be.
const (
	YamuxData, YamuxWindowUpdate, YamuxPing, YamuxGoAway = 0, 1, 2, 3
	YamuxSYN, YamuxACK, YamuxFIN, YamuxRST               = 1, 2, 4, 8
)

// YamuxHeader appends a yamux frame header to b.
func YamuxHeader(b []byte, typ, flags uint16, id, length uint32) []byte {
	var h [12]byte
	h[1] = byte(typ)
	binary.BigEndian.PutUint16(h[2:], flags)
	binary.BigEndian.PutUint32(h[4:], id)
	binary.BigEndian.PutUint32(h[8:], length)
	return append(b, h[:]...)
}
