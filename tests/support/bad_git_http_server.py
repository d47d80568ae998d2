#!/usr/bin/env python3
"""A Git HTTP server that misbehaves one chosen way, for the transport's tests.

Usage: bad_git_http_server.py MODE --log FILE. Prints its port on the first line, then serves
until killed. Every request is logged to FILE (`METHOD PATH`), and so is the end of a response
the client stopped reading (`CLOSED`). Modes:

- `slow-refs`: answers the refs request with a valid advertisement that never ends, one ref
  every 50 ms.
- `refs-with-charset`: answers the refs request with an empty repository's advertisement whose
  Content-Type has a parameter (`; charset=utf-8`); the POST is never reached.
- `post-500`: a valid advertisement of one ref, then 500 to the POST.
"""
import http.server
import sys
import time

OID = "1" * 40


def pkt(line):
    data = line.encode()
    return b"%04x" % (len(data) + 4) + data


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):
        pass

    def note(self, text):
        with open(self.server.log, "a") as f:
            f.write(text + "\n")

    def advertise(self, content_type, refs):
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

        def chunk(data):
            self.wfile.write(b"%x\r\n" % len(data) + data + b"\r\n")
            self.wfile.flush()

        chunk(pkt("# service=git-upload-pack\n") + b"0000")
        return chunk

    def do_GET(self):
        self.note("GET " + self.path)
        mode = self.server.mode
        try:
            if mode == "slow-refs":
                chunk = self.advertise("application/x-git-upload-pack-advertisement", True)
                chunk(pkt("%s HEAD\0multi_ack side-band-64k shallow\n" % OID))
                n = 0
                while True:
                    time.sleep(0.05)
                    chunk(pkt("%s refs/heads/b%d\n" % (OID, n)))
                    n += 1
            elif mode == "refs-with-charset":
                chunk = self.advertise(
                    "application/x-git-upload-pack-advertisement; charset=utf-8", False
                )
                chunk(b"0000")
                self.wfile.write(b"0\r\n\r\n")
            elif mode == "post-500":
                chunk = self.advertise("application/x-git-upload-pack-advertisement", True)
                chunk(pkt("%s HEAD\0multi_ack side-band-64k shallow\n" % OID))
                chunk(pkt("%s refs/heads/main\n" % OID) + b"0000")
                self.wfile.write(b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError):
            self.note("CLOSED")

    def do_POST(self):
        self.note("POST " + self.path)
        length = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(length)
        self.send_response(500)
        self.send_header("Content-Length", "0")
        self.end_headers()


def main():
    mode = sys.argv[1]
    log = sys.argv[sys.argv.index("--log") + 1]
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.mode = mode
    server.log = log
    print(server.server_address[1], flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
