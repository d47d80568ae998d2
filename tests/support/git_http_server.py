#!/usr/bin/env python3
"""A small smart-HTTP Git server for tests: `git http-backend` behind Python's HTTP server.

Serves every bare repository under --root at http(s)://127.0.0.1:PORT/<name>.git, read-only,
anonymous unless --user and --password are given (then HTTP Basic auth is required: 401 with
`WWW-Authenticate: Basic` otherwise). With --cert and --key it speaks TLS. Prints the port on the first line of stdout,
then serves until killed. Every request's method and path are logged to stderr.
"""
import argparse
import http.server
import os
import ssl
import subprocess
import sys


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self):
        self.backend()

    def do_POST(self):
        self.backend()

    def backend(self):
        if self.server.redirect is not None:
            self.send_response(302)
            self.send_header("Location", self.server.redirect + self.path)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if self.server.basic is not None:
            given = self.headers.get("Authorization", "")
            if given != "Basic " + self.server.basic:
                sys.stderr.write("401 %s %s\n" % (self.command, self.path))
                self.send_response(401)
                self.send_header("WWW-Authenticate", 'Basic realm="git"')
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
        path, _, query = self.path.partition("?")
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        env = dict(os.environ)
        env.update({
            "GIT_PROJECT_ROOT": self.server.root,
            "GIT_HTTP_EXPORT_ALL": "1",
            "REQUEST_METHOD": self.command,
            "PATH_INFO": path,
            "QUERY_STRING": query,
            "CONTENT_TYPE": self.headers.get("Content-Type", ""),
            "CONTENT_LENGTH": str(len(body)),
            "REMOTE_ADDR": self.client_address[0],
            "HTTP_GIT_PROTOCOL": self.headers.get("Git-Protocol", ""),
        })
        if self.headers.get("Content-Encoding") == "gzip":
            env["HTTP_CONTENT_ENCODING"] = "gzip"
        proc = subprocess.run(["git", "http-backend"], input=body, env=env, capture_output=True)
        head, _, payload = proc.stdout.partition(b"\r\n\r\n")
        status = 200
        headers = []
        for line in head.split(b"\r\n"):
            if not line:
                continue
            name, _, value = line.decode().partition(":")
            if name.lower() == "status":
                status = int(value.strip().split()[0])
            else:
                headers.append((name, value.strip()))
        self.send_response(status)
        for name, value in headers:
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, fmt, *args):
        sys.stderr.write("%s %s\n" % (self.command, self.path))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--root", required=True)
    p.add_argument("--cert")
    p.add_argument("--key")
    p.add_argument("--user")
    p.add_argument("--password")
    p.add_argument("--redirect", help="answer every request with a 302 to this base URL")
    a = p.parse_args()
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.root = a.root
    server.basic = None
    server.redirect = a.redirect
    if a.user is not None:
        import base64
        server.basic = base64.b64encode(("%s:%s" % (a.user, a.password)).encode()).decode()
    if a.cert:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(a.cert, a.key)
        server.socket = ctx.wrap_socket(server.socket, server_side=True)
    print(server.server_address[1], flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
