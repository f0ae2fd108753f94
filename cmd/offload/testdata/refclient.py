#!/usr/bin/env python3
"""An offload client written from docs/protocol.md alone, to prove the
document is enough to reimplement the protocol (TestE2EProtocolFromDocs).

It shares no code with offload: Noise_NNpsk0_25519_ChaChaPoly_SHA256 is
written out from the Noise specification (rev. 34), the key confirmation,
record layer, rekey ratchet and stream protocol from docs/protocol.md, and
yamux from its spec.md. Only the primitives come from the `cryptography`
package (Debian: python3-cryptography).

usage: refclient.py ADDR KEYFILE SUITE SERVICE [PAUSE]
SUITE is aes-{128,256}-{ctr,cbc}-hmac-sha256. SERVICE must echo. PAUSE
(seconds, default 0) is waited between the pieces of the link check, so
that a server with a short rekey_interval rekeys what it sends back.
OFFLOAD_REF_VERSION in the environment is the protocol version to speak:
3 (the default; each end's max_frame in its Noise payload) or 2.

Checks, each against the running server; any failure exits 1 naming it:
  link      handshake, confirm, a stream to SERVICE whose data is sent in
            frames of epochs 0, 1, 2 and 3 (the sender rekeys three times,
            one frame of 17 bytes up to 64 KiB each), echoed back whole,
            in whatever epochs the server sends them
  replay    the first flight of the link above, sent again on a new
            connection: the server closes it without a byte
  oldkeys   a new link that rekeys, then sends a frame sealed with the
            previous epoch's keys: the server closes the link, nothing is
            echoed
  tamper    a new link whose first frame has one ciphertext bit flipped:
            the server closes the link, nothing is echoed
"""
import base64
import hashlib
import hmac
import os
import socket
import struct
import sys
import time

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

# --- Noise_NNpsk0_25519_ChaChaPoly_SHA256 (Noise spec §5, §9) -------------


def noise_hkdf(ck, ikm, n):
    temp = hmac.new(ck, ikm, hashlib.sha256).digest()
    out, prev = [], b""
    for i in range(1, n + 1):
        prev = hmac.new(temp, prev + bytes([i]), hashlib.sha256).digest()
        out.append(prev)
    return out


def chacha_nonce(n):
    return b"\x00" * 4 + struct.pack("<Q", n)


class Symmetric:
    def __init__(self, name, prologue):
        self.h = hashlib.sha256(name).digest() if len(name) > 32 else name.ljust(32, b"\x00")
        self.ck = self.h
        self.k = None
        self.n = 0
        self.mix_hash(prologue)

    def mix_hash(self, data):
        self.h = hashlib.sha256(self.h + data).digest()

    def mix_key(self, ikm):
        self.ck, k = noise_hkdf(self.ck, ikm, 2)
        self.k, self.n = k, 0

    def mix_key_and_hash(self, ikm):
        self.ck, th, k = noise_hkdf(self.ck, ikm, 3)
        self.mix_hash(th)
        self.k, self.n = k, 0

    def encrypt_and_hash(self, pt):
        ct = ChaCha20Poly1305(self.k).encrypt(chacha_nonce(self.n), pt, self.h)
        self.n += 1
        self.mix_hash(ct)
        return ct

    def decrypt_and_hash(self, ct):
        pt = ChaCha20Poly1305(self.k).decrypt(chacha_nonce(self.n), ct, self.h)
        self.n += 1
        self.mix_hash(ct)
        return pt

    def split(self):
        k1, k2 = noise_hkdf(self.ck, b"", 2)
        return k1, k2


def raw(pub):
    return pub.public_bytes(Encoding.Raw, PublicFormat.Raw)


# --- offload: hello, messages, confirmation, keys (protocol.md §1) --------

# The protocol version to speak: 3 (each end's max_frame in its Noise
# payload), or 2 (empty payloads), which servers still answer.
VERSION = int(os.environ.get("OFFLOAD_REF_VERSION", "3"))
MAX_FRAME = 65536  # what this client accepts; it sends no longer frame
MSG_NOISE, MSG_ALERT, MSG_CONFIRM = 1, 2, 3


def hkdf(secret, salt, info, length):
    return HKDF(algorithm=hashes.SHA256(), length=length, salt=salt, info=info).derive(secret)


def recv_exact(sock, n):
    buf = b""
    while len(buf) < n:
        b = sock.recv(n - len(buf))
        if not b:
            raise EOFError("connection closed after %d of %d bytes" % (len(buf), n))
        buf += b
    return buf


class Keys:
    def __init__(self, okm, key_len):
        self.enc, self.mac, self.iv = okm[:key_len], okm[key_len:key_len + 32], okm[key_len + 32:]

    def material(self):
        return self.enc + self.mac + self.iv


def handshake(sock, psk, suite):
    """Returns (first flight bytes, send Keys, receive Keys)."""
    name = suite.encode()
    hello = b"OFLD" + bytes([VERSION, len(name)]) + name
    sym = Symmetric(b"Noise_NNpsk0_25519_ChaChaPoly_SHA256", hello)
    sym.mix_key_and_hash(psk)  # psk0: the psk token opens message 1
    e = X25519PrivateKey.generate()
    epub = raw(e.public_key())
    sym.mix_hash(epub)
    sym.mix_key(epub)  # psk handshakes: "e" also calls MixKey
    payload = struct.pack(">I", MAX_FRAME) if VERSION >= 3 else b""
    msg1 = epub + sym.encrypt_and_hash(payload)
    flight = hello + bytes([MSG_NOISE]) + struct.pack(">H", len(msg1)) + msg1
    sock.sendall(flight)

    typ, n = struct.unpack(">BH", recv_exact(sock, 3))
    body = recv_exact(sock, n)
    if typ == MSG_ALERT:
        raise RuntimeError("server alert %d %r" % (body[0], body[1:]))
    if typ != MSG_NOISE or n != 32 + len(payload) + 16:
        raise RuntimeError("server message type %d of %d bytes" % (typ, n))
    re = body[:32]
    sym.mix_hash(re)
    sym.mix_key(re)
    sym.mix_key(e.exchange(X25519PublicKey.from_public_bytes(re)))  # ee
    server_frame = sym.decrypt_and_hash(body[32:])
    if VERSION >= 3:
        (server_frame,) = struct.unpack(">I", server_frame)
        if server_frame % 16 or not 1024 <= server_frame <= 1 << 20:
            raise RuntimeError("server max_frame %d" % server_frame)
        print("version 3: server max_frame %d, this client sends frames of at most %d" % (server_frame, min(server_frame, MAX_FRAME)))
    k_c2s, k_s2c = sym.split()
    h = sym.h

    confirm = hkdf(k_c2s, h, b"offload v2 client confirm " + name, 32)
    sock.sendall(bytes([MSG_CONFIRM]) + struct.pack(">H", 32) + confirm)

    key_len = int(suite.split("-")[1]) // 8
    ln = key_len + 32 + 16
    c2s = Keys(hkdf(k_c2s, h, b"offload v2 record keys c2s " + name, ln), key_len)
    s2c = Keys(hkdf(k_s2c, h, b"offload v2 record keys s2c " + name, ln), key_len)
    return flight, c2s, s2c


# --- record layer and rekey (protocol.md §2) ------------------------------


def rekey(keys, suite, epoch):
    key_len = len(keys.enc)
    info = ("offload record rekey %s %d" % (suite, epoch)).encode()
    return Keys(hkdf(keys.material(), None, info, key_len + 48), key_len)


class Direction:
    def __init__(self, keys, suite):
        self.keys, self.suite, self.epoch, self.seq = keys, suite, 0, 0
        self.cbc = "-cbc-" in suite

    def next_epoch(self):
        self.epoch += 1
        self.keys = rekey(self.keys, self.suite, self.epoch)
        self.seq = 0

    def iv(self):
        k = self.keys
        if self.cbc:
            block = (int.from_bytes(k.iv, "big") ^ self.seq).to_bytes(16, "big")
            enc = Cipher(algorithms.AES(k.enc), modes.ECB()).encryptor()
            return enc.update(block) + enc.finalize()
        return ((int.from_bytes(k.iv, "big") + (self.seq << 32)) % (1 << 128)).to_bytes(16, "big")

    def tag(self, hdr, ct):
        return hmac.new(self.keys.mac, struct.pack(">Q", self.seq) + hdr + ct, hashlib.sha256).digest()[:16]

    def seal(self, pt, new=False, flip=False):
        if new:
            self.next_epoch()
        mode = modes.CBC(self.iv()) if self.cbc else modes.CTR(self.iv())
        if self.cbc:
            pad = 16 - len(pt) % 16
            pt = pt + bytes([pad]) * pad
        enc = Cipher(algorithms.AES(self.keys.enc), mode).encryptor()
        ct = enc.update(pt) + enc.finalize()
        hdr = struct.pack(">I", (1 << 31 if new else 0) | len(ct))
        tag = self.tag(hdr, ct)
        if flip:
            ct = bytes([ct[0] ^ 1]) + ct[1:]
        self.seq += 1
        return hdr + ct + tag

    def open(self, sock):
        hdr = recv_exact(sock, 4)
        (h,) = struct.unpack(">I", hdr)
        if h >> 31:
            self.next_epoch()
        n = h & 0x7FFFFFFF
        if n == 0 or n > 1 << 20:
            raise RuntimeError("frame length %d" % n)
        ct = recv_exact(sock, n)
        tag = recv_exact(sock, 16)
        if not hmac.compare_digest(tag, self.tag(hdr, ct)):
            raise RuntimeError("server frame %d of epoch %d: bad tag" % (self.seq, self.epoch))
        mode = modes.CBC(self.iv()) if self.cbc else modes.CTR(self.iv())
        dec = Cipher(algorithms.AES(self.keys.enc), mode).decryptor()
        pt = dec.update(ct) + dec.finalize()
        if self.cbc:
            pt = pt[: -pt[-1]]
        self.seq += 1
        return pt


# --- yamux (hashicorp/yamux spec.md) and the stream protocol (§3) ---------

Y_DATA, Y_WINDOW, Y_PING, Y_GOAWAY = 0, 1, 2, 3
F_SYN, F_ACK, F_FIN, F_RST = 1, 2, 4, 8


def yamux(typ, flags, sid, length, body=b""):
    return struct.pack(">BBHII", 0, typ, flags, sid, length) + body


class Link:
    def __init__(self, addr, psk, suite):
        host, port = addr.rsplit(":", 1)
        self.sock = socket.create_connection((host.strip("[]"), int(port)), timeout=10)
        self.flight, c2s, s2c = handshake(self.sock, psk, suite)
        self.out, self.inn = Direction(c2s, suite), Direction(s2c, suite)
        self.buf = b""

    def send(self, data, new=False, flip=False):
        self.sock.sendall(self.out.seal(data, new=new, flip=flip))

    def read_yamux(self):
        """The next yamux frame (type, flags, stream, body); answers pings."""
        while True:
            while len(self.buf) < 12:
                self.buf += self.inn.open(self.sock)
            _, typ, flags, sid, length = struct.unpack(">BBHII", self.buf[:12])
            blen = length if typ == Y_DATA else 0
            while len(self.buf) < 12 + blen:
                self.buf += self.inn.open(self.sock)
            body, self.buf = self.buf[12:12 + blen], self.buf[12 + blen:]
            if typ == Y_PING and flags & F_SYN:
                self.send(yamux(Y_PING, F_ACK, 0, length))
                continue
            return typ, flags, sid, body if typ == Y_DATA else length

    def closed_without_data(self):
        """True if the server closes the link before any yamux data frame."""
        try:
            while True:
                typ, _, _, _ = self.read_yamux()
                if typ == Y_DATA:
                    return False
        except (EOFError, ConnectionResetError, socket.timeout):
            return True


def request(service):
    name = service.encode()
    return bytes([2, 1]) + struct.pack(">H", len(name)) + name


def chunk(data):
    return struct.pack(">I", len(data)) + data


def echo_stream(link, service, pieces, epochs, pause=0.0):
    """Sends request and pieces on stream 1, piece i in a frame that starts
    a new epoch if epochs[i], pause seconds apart; returns the bytes
    echoed before the end."""
    link.send(yamux(Y_WINDOW, F_SYN, 1, 0))
    for i, p in enumerate(pieces):
        if i > 0:
            time.sleep(pause)
        body = (request(service) if i == 0 else b"") + chunk(p)
        link.send(yamux(Y_DATA, 0, 1, len(body), body), new=epochs[i])
    end = struct.pack(">I", 0)
    link.send(yamux(Y_DATA, 0, 1, len(end), end))
    got, status, want = b"", None, sum(len(p) for p in pieces)
    while True:
        typ, flags, sid, body = link.read_yamux()
        if typ != Y_DATA or sid != 1:
            if flags & F_RST:
                raise RuntimeError("stream reset by the server")
            continue
        got += body
        if status is None and len(got) >= 2 and len(got) >= 2 + got[1]:
            status, msg = got[0], got[2:2 + got[1]]
            if status != 0:
                raise RuntimeError("stream refused: status %d %r" % (status, msg))
            got = got[2 + got[1]:]
        # Chunks: stop at the end marker.
        data, rest = b"", got if status is not None else b""
        while len(rest) >= 4:
            (n,) = struct.unpack(">I", rest[:4])
            if n == 0:
                return data
            if n == 0xFFFFFFFF:
                raise RuntimeError("server aborted the stream")
            if len(rest) < 4 + n:
                break
            data, rest = data + rest[4:4 + n], rest[4 + n:]
        if len(data) > want:
            raise RuntimeError("more echoed than sent")


def main():
    addr, key_file, suite, service = sys.argv[1:5]
    pause = float(sys.argv[5]) if len(sys.argv) > 5 else 0.0
    psk = base64.b64decode(open(key_file, "rb").read().strip())  # docs/tunnel.md, "Key file"
    failed = []

    # link: four epochs, the pieces' sizes straddling frames' sizes.
    link = Link(addr, psk, suite)
    pieces = [os.urandom(n) for n in (17, 4096, 65536 - 32, 1000)]
    got = echo_stream(link, service, pieces, [False, True, True, True], pause)
    if got != b"".join(pieces):
        failed.append("link: echoed %d bytes, want %d equal" % (len(got), sum(map(len, pieces))))
    else:
        print("link ok: %d bytes echoed across epochs 0-3, server frames in epoch %d" % (len(got), link.inn.epoch))

    # replay: the recorded first flight on a new connection.
    host, port = addr.rsplit(":", 1)
    s = socket.create_connection((host.strip("[]"), int(port)), timeout=10)
    s.sendall(link.flight)
    try:
        answer = s.recv(64)
    except ConnectionResetError:
        answer = b""
    s.close()
    link.sock.close()
    if answer:
        failed.append("replay: the server answered a replayed first flight with %r" % answer)
    else:
        print("replay ok: closed without a byte")

    # oldkeys: rekey, then a frame sealed with the previous epoch's keys.
    link = Link(addr, psk, suite)
    old = Direction(link.out.keys, suite)  # epoch 0's keys, kept
    link.send(yamux(Y_WINDOW, F_SYN, 1, 0), new=True)
    old.seq = link.out.seq  # the frame the server expects next, but under epoch 0's keys
    body = request(service) + chunk(b"stale")
    link.sock.sendall(old.seal(yamux(Y_DATA, 0, 1, len(body), body)))
    if link.closed_without_data():
        print("oldkeys ok: link closed, nothing echoed")
    else:
        failed.append("oldkeys: the server took a frame sealed with the previous epoch's keys")
    link.sock.close()

    # tamper: one flipped ciphertext bit in the first frame.
    link = Link(addr, psk, suite)
    body = request(service) + chunk(b"tampered")
    link.send(yamux(Y_WINDOW, F_SYN, 1, 0) + yamux(Y_DATA, 0, 1, len(body), body), flip=True)
    if link.closed_without_data():
        print("tamper ok: link closed, nothing echoed")
    else:
        failed.append("tamper: the server took a frame with a flipped bit")
    link.sock.close()

    for f in failed:
        print("FAIL " + f)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
