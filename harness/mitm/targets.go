package main

import (
	"encoding/binary"
	"errors"
	"io"
	"net"
	"os"
	"syscall"
)

// pat is byte i of the data of stream id.
func pat(id uint64, i int64) byte {
	x := uint64(i)*0x9E3779B97F4A7C15 ^ id*0xBF58476D1CE4E5B9
	x ^= x >> 29
	return byte(x)
}

// endKind names how a stream ended.
func endKind(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, io.EOF):
		return "eof"
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		return "reset"
	case errors.Is(err, os.ErrDeadlineExceeded):
		return "timeout"
	}
	return "other:" + err.Error()
}

// readHeader reads a bulk stream's header: its id and its length.
func readHeader(c net.Conn) (id uint64, total int64, err error) {
	var h [16]byte
	if _, err := io.ReadFull(c, h[:]); err != nil {
		return 0, 0, err
	}
	return binary.BigEndian.Uint64(h[:]), int64(binary.BigEndian.Uint64(h[8:])), nil
}

// header is a bulk stream's header.
func header(id uint64, total int64) []byte {
	h := binary.BigEndian.AppendUint64(nil, id)
	return binary.BigEndian.AppendUint64(h, uint64(total))
}

// sink is the uploads' target: it reads a header (id, length), checks every
// byte against pat, and records how the stream ended. After a complete
// stream it writes one byte, the application's proof of completeness.
func sink(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			id, total, err := readHeader(c)
			if err != nil {
				count(res.TargetEnds, "sink-nohdr-"+endKind(err))
				if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
					violate("sink: clean end before the header (%v)", err)
				}
				return
			}
			buf := make([]byte, 64<<10)
			var n int64
			for {
				k, err := c.Read(buf)
				for i := range k {
					if buf[i] != pat(id, n+int64(i)) {
						violate("sink %d: forged byte at %d", id, n+int64(i))
						return
					}
				}
				n += int64(k)
				if err != nil {
					kind := endKind(err)
					if kind == "eof" && n != total {
						violate("sink %d: clean EOF after %d of %d bytes", id, n, total)
						kind = "eof-short"
					}
					count(res.TargetEnds, "sink-"+kind)
					if kind == "eof" {
						// A failed ack shows at the application as up-noack-*.
						_, _ = c.Write([]byte{1})
					}
					return
				}
			}
		}()
	}
}

// source is the downloads' target: it reads a header (id, length), writes
// that many bytes of pat, and closes cleanly.
func source(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			id, total, err := readHeader(c)
			if err != nil {
				count(res.TargetEnds, "source-nohdr-"+endKind(err))
				return
			}
			buf := make([]byte, 32<<10)
			for n := int64(0); n < total; {
				k := int(min(int64(len(buf)), total-n))
				for i := range k {
					buf[i] = pat(id, n+int64(i))
				}
				if _, err := c.Write(buf[:k]); err != nil {
					count(res.TargetEnds, "source-"+endKind(err))
					return
				}
				n += int64(k)
			}
			count(res.TargetEnds, "source-done")
		}()
	}
}

// echo is the interactive streams' target. The application never closes
// an interactive stream cleanly while it runs, so a clean EOF here before
// the end is a cut that looks clean: a violation.
func echo(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			_, err := io.Copy(c, c)
			kind := endKind(err)
			if err == nil {
				kind = "eof"
			}
			count(res.TargetEnds, "echo-"+kind)
			if kind == "eof" {
				mu.Lock()
				clean := appClosedEcho
				mu.Unlock()
				if !clean {
					violate("echo target: clean EOF while the application was still open")
				}
			}
		}()
	}
}
