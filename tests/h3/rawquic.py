"""Just enough QUIC v1 (RFC 9000/9001) in Python to send one hand-made Initial packet and read
the server's Initial answers: Initial key derivation, packet protection and header protection,
a TLS 1.3 ClientHello whose extensions the caller picks, and a frame walker that finds
CRYPTO and CONNECTION_CLOSE frames. Used by tests/test_h3_hardening.py to send bytes no
library client would send (a ClientHello without quic_transport_parameters)."""
import os
import socket
import struct

from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.hmac import HMAC

INITIAL_SALT_V1 = bytes.fromhex("38762cf7f55934b34d179ae6a4c80cadccbb7f0a")


def varint(v):
    if v < 0x40:
        return bytes([v])
    if v < 0x4000:
        return struct.pack(">H", 0x4000 | v)
    if v < 0x40000000:
        return struct.pack(">I", 0x80000000 | v)
    return struct.pack(">Q", 0xC000000000000000 | v)


def read_varint(b, i):
    n = 1 << (b[i] >> 6)
    v = b[i] & 0x3F
    for k in range(1, n):
        v = (v << 8) | b[i + k]
    return v, i + n


def hkdf_extract(salt, ikm):
    h = HMAC(salt, hashes.SHA256())
    h.update(ikm)
    return h.finalize()


def hkdf_expand_label(secret, label, length):
    full = b"tls13 " + label
    info = struct.pack(">H", length) + bytes([len(full)]) + full + b"\x00"
    out, t, i = b"", b"", 1
    while len(out) < length:
        h = HMAC(secret, hashes.SHA256())
        h.update(t + info + bytes([i]))
        t = h.finalize()
        out += t
        i += 1
    return out[:length]


class Keys:
    def __init__(self, secret):
        self.key = hkdf_expand_label(secret, b"quic key", 16)
        self.iv = hkdf_expand_label(secret, b"quic iv", 12)
        self.hp = hkdf_expand_label(secret, b"quic hp", 16)

    def nonce(self, pn):
        return bytes(a ^ b for a, b in zip(self.iv, pn.to_bytes(12, "big")))

    def mask(self, sample):
        e = Cipher(algorithms.AES(self.hp), modes.ECB()).encryptor()
        return e.update(sample) + e.finalize()


def initial_keys(dcid):
    s = hkdf_extract(INITIAL_SALT_V1, dcid)
    return (Keys(hkdf_expand_label(s, b"client in", 32)),
            Keys(hkdf_expand_label(s, b"server in", 32)))


def ext(kind, body):
    return struct.pack(">HH", kind, len(body)) + body


def client_hello(scid, transport_params=True, alpn=b"h3", sni=b"localhost"):
    """A TLS 1.3 ClientHello (x25519, TLS_AES_128_GCM_SHA256). transport_params: include the
    quic_transport_parameters extension (0x39) with initial_source_connection_id = scid."""
    pub = X25519PrivateKey.generate().public_key().public_bytes(
        serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    exts = b""
    exts += ext(0, struct.pack(">HBH", len(sni) + 3, 0, len(sni)) + sni)
    exts += ext(10, struct.pack(">HH", 2, 0x001D))
    sigs = [0x0403, 0x0804, 0x0805, 0x0806, 0x0401, 0x0501, 0x0807, 0x0503]
    exts += ext(13, struct.pack(">H", 2 * len(sigs)) + b"".join(struct.pack(">H", s) for s in sigs))
    exts += ext(16, struct.pack(">HB", len(alpn) + 1, len(alpn)) + alpn)
    exts += ext(43, b"\x02\x03\x04")
    exts += ext(45, b"\x01\x01")
    exts += ext(51, struct.pack(">HHH", len(pub) + 4, 0x001D, len(pub)) + pub)
    if transport_params:
        tp = varint(0x0F) + varint(len(scid)) + scid            # initial_source_connection_id
        tp += varint(0x04) + varint(4) + varint(1 << 20)        # initial_max_data
        tp += varint(0x08) + varint(1) + varint(3)              # initial_max_streams_uni
        exts += ext(0x39, tp)
    body = b"\x03\x03" + os.urandom(32) + b"\x00" + struct.pack(">HH", 2, 0x1301) + b"\x01\x00"
    body += struct.pack(">H", len(exts)) + exts
    return b"\x01" + len(body).to_bytes(3, "big") + body


def initial_packet(dcid, scid, keys, payload, pn=0):
    """A client Initial carrying `payload` (frames), padded to a 1200-byte datagram."""
    pnlen = 4
    hdr_fixed = bytes([0xC0 | (pnlen - 1)]) + struct.pack(">I", 1)
    hdr_fixed += bytes([len(dcid)]) + dcid + bytes([len(scid)]) + scid + varint(0)
    # pad so that the whole datagram is 1200 bytes (2-byte Length field)
    total = len(hdr_fixed) + 2 + pnlen + len(payload) + 16
    if total < 1200:
        payload += b"\x00" * (1200 - total)
    length = pnlen + len(payload) + 16
    hdr = hdr_fixed + struct.pack(">H", 0x4000 | length) + pn.to_bytes(pnlen, "big")
    ct = AESGCM(keys.key).encrypt(keys.nonce(pn), payload, hdr)
    pn_off = len(hdr) - pnlen
    sample = ct[4 - pnlen:4 - pnlen + 16]
    m = keys.mask(sample)
    first = bytes([hdr[0] ^ (m[0] & 0x0F)])
    pnb = bytes(a ^ b for a, b in zip(hdr[pn_off:], m[1:1 + pnlen]))
    return first + hdr[1:pn_off] + pnb + ct


def crypto_frame(data, offset=0):
    return b"\x06" + varint(offset) + varint(len(data)) + data


def parse_long_packets(dgram):
    """Yield (type, header_bytes_until_pn, rest_of_packet) for each long-header packet."""
    i = 0
    while i < len(dgram) and dgram[i] & 0x80:
        start = i
        ptype = (dgram[i] >> 4) & 3
        i += 5
        dl = dgram[i]
        i += 1 + dl
        sl = dgram[i]
        i += 1 + sl
        if ptype == 0:
            tl, i = read_varint(dgram, i)
            i += tl
        length, i = read_varint(dgram, i)
        yield ptype, dgram[start:i], dgram[i:i + length]
        i += length


def open_initial(hdr, rest, keys):
    """Decrypt one Initial packet; returns the plaintext frames."""
    sample = rest[4:20]
    m = keys.mask(sample)
    first = hdr[0] ^ (m[0] & 0x0F)
    pnlen = (first & 3) + 1
    pnb = bytes(a ^ b for a, b in zip(rest[:pnlen], m[1:1 + pnlen]))
    pn = int.from_bytes(pnb, "big")
    aad = bytes([first]) + hdr[1:] + pnb
    return AESGCM(keys.key).decrypt(keys.nonce(pn), rest[pnlen:], aad)


def frames(pt):
    """Yield (type, info) for the frames of an Initial: CRYPTO -> (offset, data),
    CONNECTION_CLOSE -> error code; stops at anything else it cannot skip."""
    i = 0
    while i < len(pt):
        t = pt[i]
        i += 1
        if t == 0x00 or t == 0x01:
            continue
        if t in (0x02, 0x03):
            _, i = read_varint(pt, i)
            _, i = read_varint(pt, i)
            n, i = read_varint(pt, i)
            _, i = read_varint(pt, i)
            for _ in range(n):
                _, i = read_varint(pt, i)
                _, i = read_varint(pt, i)
            if t == 0x03:
                for _ in range(3):
                    _, i = read_varint(pt, i)
            continue
        if t == 0x06:
            off, i = read_varint(pt, i)
            n, i = read_varint(pt, i)
            yield "CRYPTO", (off, pt[i:i + n])
            i += n
            continue
        if t in (0x1C, 0x1D):
            code, i = read_varint(pt, i)
            if t == 0x1C:
                _, i = read_varint(pt, i)
            n, i = read_varint(pt, i)
            yield "CLOSE", (code, pt[i:i + n])
            i += n
            continue
        yield "OTHER", t
        return


def send_initial(port, transport_params, host="127.0.0.1", timeout=5.0, max_dgrams=20):
    """Send one Initial with a ClientHello (with or without quic_transport_parameters) and read
    the server's Initial packets until a CONNECTION_CLOSE or `timeout` with nothing new.
    Returns a list of ("CRYPTO", (offset, data)) / ("CLOSE", (code, reason)) items, and the
    datagram sent (for fuzz seeds)."""
    dcid, scid = os.urandom(8), os.urandom(8)
    ck, sk = initial_keys(dcid)
    pkt = initial_packet(dcid, scid, ck,
                         crypto_frame(client_hello(scid, transport_params=transport_params)))
    got = []
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.settimeout(timeout)
        s.sendto(pkt, (host, port))
        for _ in range(max_dgrams):
            try:
                d, _ = s.recvfrom(65536)
            except socket.timeout:
                break
            for ptype, hdr, rest in parse_long_packets(d):
                if ptype != 0:
                    continue
                got += list(frames(open_initial(hdr, rest, sk)))
            if any(k == "CLOSE" for k, _ in got) or any(k == "CRYPTO" for k, _ in got):
                break
    return got, pkt
