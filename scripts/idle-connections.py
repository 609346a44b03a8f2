#!/usr/bin/env python3
"""Open N idle HTTP/2 connections to a running broker (Unix socket or TCP), as a gRPC client
leaves them: preface, SETTINGS, the server's SETTINGS acknowledged, one ServerInfo; then
nothing. Print the broker's VmRSS before and after (bench-results/load.md, fifteenth session).

    skillbox serve --socket /tmp/i/s.sock --max-connections 4000 & \
        python3 scripts/idle-connections.py unix /tmp/i/s.sock $! 1000
    skillbox serve --tcp 127.0.0.1:47611 --max-connections 4000 & \
        python3 scripts/idle-connections.py tcp 127.0.0.1:47611 $! 1000
"""
import socket, sys, time, struct

def rss(pid):
    for l in open(f"/proc/{pid}/status"):
        if l.startswith("VmRSS:"):
            return int(l.split()[1])  # kB

def frame(kind, flags, stream, payload=b""):
    return struct.pack(">I", len(payload))[1:] + bytes([kind, flags]) + struct.pack(">I", stream) + payload

def lit(name, value):
    out = bytearray([0, len(name)]) + name + bytes([len(value)]) + value
    return bytes(out)

def main():
    kind, target, pid, n = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    before = rss(pid)
    conns = []
    hdrs = (lit(b":method", b"POST") + lit(b":scheme", b"http") +
            lit(b":path", b"/skillbox.v1.Skillbox/ServerInfo") + lit(b":authority", b"localhost") +
            lit(b"content-type", b"application/grpc") + lit(b"te", b"trailers"))
    for i in range(n):
        if kind == "unix":
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.connect(target)
        else:
            host, port = target.rsplit(":", 1)
            s = socket.create_connection((host, int(port)))
        s.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + frame(4, 0, 0) + frame(4, 1, 0)
                  + frame(1, 4, 1, hdrs) + frame(0, 1, 1, b"\0\0\0\0\0"))
        conns.append(s)
    # Let the broker read and answer everything.
    time.sleep(3)
    for s in conns:
        s.setblocking(False)
        try:
            while s.recv(65536):
                pass
        except BlockingIOError:
            pass
    time.sleep(1)
    after = rss(pid)
    print(f"{kind}: {n} idle connections: broker VmRSS {before/1024:.1f} MB -> {after/1024:.1f} MB, {(after-before)/n:.1f} KB each")
    for s in conns:
        s.close()

main()
