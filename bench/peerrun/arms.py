"""bench/run.py's arms: the servers under test: Ferry, nginx, HAProxy, h2o, lighttpd and the bare
epoll floor, each writing its own config."""
import datetime
import hashlib
import os
import shutil
import sys
import tempfile
from .common import (
    FILE_NAME, FILE_SIZE, H2O_BIN, HAPROXY_BIN, HELLO, HERE, LIGHTTPD_BIN, NGINX_BIN, ORIGIN_CPU,
    ROWS, free_port, log, run
)
from .server import Server


class Env:
    """Temp dir with cert, docroot, configs and the built bare binary."""

    def __init__(self, args):
        self.args = args
        self.dir = tempfile.mkdtemp(prefix="ferry-bench-")
        self.cert = os.path.join(self.dir, "cert.pem")
        self.key = os.path.join(self.dir, "key.pem")
        self.docroot = os.path.join(self.dir, "docroot")
        os.mkdir(self.docroot)
        # 4096 deterministic, non-text bytes
        blob = b"".join(hashlib.sha256(str(i).encode()).digest() for i in range(FILE_SIZE // 32))
        self.file_body = blob
        with open(os.path.join(self.docroot, FILE_NAME), "wb") as f:
            f.write(blob)
        # the 13 bytes as a file, for the arms that have no fixed-response directive
        with open(os.path.join(self.docroot, "hello"), "wb") as f:
            f.write(HELLO)
        self.port = {k: free_port() for k in
                     ("plain", "tls", "bare-static", "bare-file", "nginx-h2c", "nginx-h2",
                      "h2o-h2c", "h2o-h2", "lighttpd-h2c", "lighttpd-h2", "origin",
                      "ferry-rp", "ferry-rpt", "nginx-rp", "nginx-rpt", "haproxy-rp",
                      "haproxy-rpt", "h2o-rp", "h2o-rpt")}
        self._cert()
        self.bare = self._build_bare()

    def _cert(self):
        r = run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                 "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", self.key,
                 "-out", self.cert, "-days", "30", "-subj", "/CN=localhost",
                 "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"], timeout=60)
        if r.returncode != 0:
            sys.exit("openssl failed: " + r.stderr)

    def _build_bare(self):
        out = os.path.join(self.dir, "bare")
        r = run(["cc", "-std=c17", "-O2", "-Wall", "-Wextra", "-Wpedantic", "-o", out,
                 os.path.join(HERE, "bare.c")], timeout=120)
        if r.returncode != 0 or r.stderr.strip():
            sys.exit("building bench/bare.c failed or warned:\n" + r.stderr)
        return out

    def path(self, name):
        return os.path.join(self.dir, name)

    def cleanup(self):
        if self.args.keep_tmp:
            log(f"kept temp dir {self.dir}")
        else:
            shutil.rmtree(self.dir, ignore_errors=True)


# --------------------------------------------------------------------------- arms

class Named:
    def __init__(self, name):
        self.name = name


class Arm:
    name = ""
    tls = True
    protos = ("h1",)
    reverse = None  # None: cannot proxy (reverse_why says why); else (plain port, TLS port)
    reverse_why = "not possible"

    def __init__(self, env):
        self.env = env

    def available(self):
        return True, ""

    def supports(self, row):
        content, transport, proto = ROWS[row]
        if content == "reverse":
            return self.reverse is not None
        return proto in self.protos and (self.tls or transport == "plain")

    def why_not(self, row):
        return self.reverse_why if ROWS[row][0] == "reverse" else "not possible"

    def check_unchanged(self):
        """None, or why the measured binary can no longer be trusted (ferry only)."""
        return None

    def instances(self):
        """name -> (argv, [ports])"""
        raise NotImplementedError

    def instance_for(self, row):
        return "reverse" if ROWS[row][0] == "reverse" else "main"

    def url(self, row):
        content, transport, _ = ROWS[row]
        path = "/hello" if content in ("static", "reverse") else "/" + FILE_NAME
        if content == "reverse":
            return (f"https://127.0.0.1:{self.reverse[1]}{path}" if transport == "tls"
                    else f"http://127.0.0.1:{self.reverse[0]}{path}")
        if ROWS[row][2] == "h2" and hasattr(self, "h2_ports"):
            return (f"https://127.0.0.1:{self.h2_ports[1]}{path}" if transport == "tls"
                    else f"http://127.0.0.1:{self.h2_ports[0]}{path}")
        if transport == "tls":
            return f"https://127.0.0.1:{self.env.port['tls']}{path}"
        return f"http://127.0.0.1:{self.env.port['plain']}{path}"

    def expected(self, row):
        return HELLO if ROWS[row][0] in ("static", "reverse") else self.env.file_body


class Ferry(Arm):
    name = "ferry"
    protos = ("h1", "h2")

    def __init__(self, env, binary):
        super().__init__(env)
        # Measure a copy taken now: others rebuild build/ferry while the benchmark runs,
        # and the K=200 and K=2200 runs must be the same binary.
        self.source = binary
        self.binary = binary
        self.sha256 = None
        if os.access(binary, os.X_OK):
            self.binary = env.path("ferry")
            shutil.copy2(binary, self.binary)
            with open(self.binary, "rb") as f:
                self.sha256 = hashlib.sha256(f.read()).hexdigest()
            self.built = datetime.datetime.fromtimestamp(
                os.stat(binary).st_mtime).isoformat(timespec="seconds")
        self.stamp = self._stamp()
        self.conf = env.path("ferry.yaml")
        with open(self.conf, "w") as f:
            f.write(f"""workers: 1
listeners:
  - address: 127.0.0.1:{env.port['plain']}
  - address: 127.0.0.1:{env.port['tls']}
    tls: {{cert: {env.cert}, key: {env.key}}}
routes:
  - match: {{path: /hello}}
    respond: {{status: 200, headers: {{content-type: text/plain}}, body: "Hello, world!"}}
  - static: {{root: {env.docroot}}}
log: {{level: warn}}
""")
        # reverse rows: its own instance; pooled keep-alive to the origin (the default)
        self.reverse = (env.port["ferry-rp"], env.port["ferry-rpt"])
        self.rconf = env.path("ferry-reverse.yaml")
        with open(self.rconf, "w") as f:
            f.write(f"""workers: 1
listeners:
  - address: 127.0.0.1:{self.reverse[0]}
  - address: 127.0.0.1:{self.reverse[1]}
    tls: {{cert: {env.cert}, key: {env.key}}}
upstreams:
  - name: app
    servers: ["http://127.0.0.1:{env.port['origin']}"]
routes:
  - proxy: app
log: {{level: warn}}
""")

    def _stamp(self):
        try:
            st = os.stat(self.binary)
            return (st.st_ino, st.st_size, st.st_mtime_ns)
        except OSError:
            return None

    def check_unchanged(self):
        if self._stamp() != self.stamp:
            return f"{self.binary} changed during the run: re-run this row"
        return None

    def available(self):
        if not os.access(self.binary, os.X_OK):
            return False, f"not built ({self.source} missing)"
        return True, ""

    def instances(self):
        # the listeners keep their default protocols: h1,h2c plain and h1,h2 on TLS
        return {"main": ([self.binary, "run", "-c", self.conf],
                         [self.env.port["plain"], self.env.port["tls"]]),
                "reverse": ([self.binary, "run", "-c", self.rconf], list(self.reverse))}


class Nginx(Arm):
    name = "nginx"
    protos = ("h1", "h2")

    def __init__(self, env):
        super().__init__(env)
        self.h2_ports = (env.port["nginx-h2c"], env.port["nginx-h2"])
        d = env.path("nginx")
        os.makedirs(d, exist_ok=True)
        self.prefix = d
        self.conf = os.path.join(d, "nginx.conf")
        temps = "\n".join(f"    {k}_temp_path {d}/{k};" for k in
                          ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))
        with open(self.conf, "w") as f:
            f.write(f"""# generated by bench/run.py: one process, no master, same content as ferry
worker_processes 1;
daemon off;
master_process off;
pid {d}/nginx.pid;
error_log {d}/error.log warn;
events {{
    worker_connections 4096;
}}
http {{
    access_log off;
{temps}
    sendfile on;
    tcp_nopush on;
    tcp_nodelay on;
    keepalive_requests 100000000;
    keepalive_timeout 75s;
    default_type application/octet-stream;
    ssl_protocols TLSv1.3;
    server {{
        listen 127.0.0.1:{env.port['plain']};
        listen 127.0.0.1:{env.port['tls']} ssl;
        # HTTP/2 on their own ports, so the HTTP/1.1 listeners stay as they were:
        # h2c by prior knowledge (a plain `http2` listener speaks only h2c) and h2 by ALPN
        listen 127.0.0.1:{env.port['nginx-h2c']} http2;
        listen 127.0.0.1:{env.port['nginx-h2']} ssl http2;
        ssl_certificate {env.cert};
        ssl_certificate_key {env.key};
        root {env.docroot};
        location = /hello {{
            default_type text/plain;
            return 200 "Hello, world!";
        }}
    }}
}}
""")

        # reverse rows: a second nginx (own prefix and conf) proxying to the shared origin
        self.reverse = (env.port["nginx-rp"], env.port["nginx-rpt"])
        rd = env.path("nginx-reverse")
        os.makedirs(rd, exist_ok=True)
        self.rprefix = rd
        self.rconf = os.path.join(rd, "nginx.conf")
        rtemps = "\n".join(f"    {k}_temp_path {rd}/{k};" for k in
                           ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))
        with open(self.rconf, "w") as f:
            f.write(f"""# generated by bench/run.py: one process, no master, reverse proxy to the origin
worker_processes 1;
daemon off;
master_process off;
pid {rd}/nginx.pid;
error_log {rd}/error.log warn;
events {{
    worker_connections 4096;
}}
http {{
    access_log off;
{rtemps}
    tcp_nodelay on;
    keepalive_requests 100000000;
    keepalive_timeout 75s;
    ssl_protocols TLSv1.3;
    upstream app {{
        server 127.0.0.1:{env.port['origin']};
        keepalive 64;
    }}
    server {{
        listen 127.0.0.1:{self.reverse[0]};
        listen 127.0.0.1:{self.reverse[1]} ssl http2;
        ssl_certificate {env.cert};
        ssl_certificate_key {env.key};
        location / {{
            proxy_pass http://app;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
        }}
    }}
}}
""")

    def available(self):
        if not os.access(NGINX_BIN, os.X_OK):
            return False, "nginx not installed"
        return True, ""

    def instances(self):
        return {"main": ([NGINX_BIN, "-p", self.prefix, "-e", os.path.join(self.prefix, "error.log"),
                          "-c", self.conf], [self.env.port["plain"], self.env.port["tls"],
                                             self.env.port["nginx-h2c"], self.env.port["nginx-h2"]]),
                "reverse": ([NGINX_BIN, "-p", self.rprefix, "-e",
                             os.path.join(self.rprefix, "error.log"), "-c", self.rconf],
                            list(self.reverse))}


class Haproxy(Arm):
    """Reverse-proxy rows only: one thread, mode http, connection reuse to the origin."""
    name = "haproxy"
    protos = ()

    def __init__(self, env):
        super().__init__(env)
        self.reverse = (env.port["haproxy-rp"], env.port["haproxy-rpt"])
        self.pem = env.path("haproxy-cert.pem")  # haproxy wants cert + key in one file
        with open(self.pem, "w") as f:
            f.write(open(env.cert).read() + open(env.key).read())
        self.conf = env.path("haproxy.cfg")
        with open(self.conf, "w") as f:
            f.write(f"""# generated by bench/run.py: one thread, reverse proxy to the origin, no logging
global
    nbthread 1
    maxconn 4096
defaults
    mode http
    option http-keep-alive
    http-reuse always
    timeout connect 5s
    timeout client 75s
    timeout server 75s
    timeout http-keep-alive 75s
frontend plain
    bind 127.0.0.1:{self.reverse[0]}
    default_backend app
frontend tls
    bind 127.0.0.1:{self.reverse[1]} ssl crt {self.pem} alpn h2,http/1.1 ssl-min-ver TLSv1.3
    default_backend app
backend app
    server origin 127.0.0.1:{env.port['origin']}
""")

    def available(self):
        if not os.access(HAPROXY_BIN, os.X_OK):
            return False, "haproxy not installed"
        return True, ""

    def instances(self):
        return {"reverse": ([HAPROXY_BIN, "-db", "-f", self.conf], list(self.reverse))}


class Origin:
    """The reverse rows' one shared HTTP/1.1 origin: nginx, pinned with the load generator."""

    def __init__(self, env):
        self.port = env.port["origin"]
        d = env.path("origin")
        os.makedirs(d, exist_ok=True)
        self.prefix, self.conf = d, os.path.join(d, "nginx.conf")
        temps = "\n".join(f"    {k}_temp_path {d}/{k};" for k in
                          ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))
        with open(self.conf, "w") as f:
            f.write(f"""# generated by bench/run.py: the origin of the reverse rows
worker_processes 1;
daemon off;
master_process off;
pid {d}/nginx.pid;
error_log {d}/error.log warn;
events {{
    worker_connections 4096;
}}
http {{
    access_log off;
{temps}
    tcp_nodelay on;
    keepalive_requests 100000000;
    keepalive_timeout 300s;
    server {{
        listen 127.0.0.1:{self.port} backlog=4096;
        location / {{
            default_type text/plain;
            return 200 "Hello, world!";
        }}
    }}
}}
""")
        self.server = Server("origin", [NGINX_BIN, "-p", d, "-e", os.path.join(d, "error.log"),
                                        "-c", self.conf], [self.port], env.path("origin.log"),
                             cpu=ORIGIN_CPU)


class H2o(Arm):
    name = "h2o"
    protos = ("h2",)

    def __init__(self, env):
        super().__init__(env)
        self.h2_ports = (env.port["h2o-h2c"], env.port["h2o-h2"])
        self.conf = env.path("h2o.yaml")
        with open(self.conf, "w") as f:
            f.write(f"""# generated by bench/run.py: one worker thread, /hello = a 13-byte file
user: root
num-threads: 1
listen:
  host: 127.0.0.1
  port: {self.h2_ports[0]}
listen:
  host: 127.0.0.1
  port: {self.h2_ports[1]}
  ssl:
    certificate-file: {env.cert}
    key-file: {env.key}
    ocsp-update-interval: 0
file.mime.setdefaulttype: text/plain
hosts:
  default:
    paths:
      /hello:
        file.file: {os.path.join(env.docroot, "hello")}
""")
        # reverse rows: a second h2o proxying to the origin (keep-alive to it by default)
        self.reverse = (env.port["h2o-rp"], env.port["h2o-rpt"])
        self.rconf = env.path("h2o-reverse.yaml")
        with open(self.rconf, "w") as f:
            f.write(f"""# generated by bench/run.py: one worker thread, reverse proxy to the origin
user: root
num-threads: 1
listen:
  host: 127.0.0.1
  port: {self.reverse[0]}
listen:
  host: 127.0.0.1
  port: {self.reverse[1]}
  ssl:
    certificate-file: {env.cert}
    key-file: {env.key}
    ocsp-update-interval: 0
hosts:
  default:
    paths:
      /:
        proxy.reverse.url: http://127.0.0.1:{env.port['origin']}/
""")

    def available(self):
        if not os.access(H2O_BIN, os.X_OK):
            return False, "h2o not installed"
        return True, ""

    def instances(self):
        return {"main": ([H2O_BIN, "-m", "worker", "-c", self.conf], list(self.h2_ports)),
                "reverse": ([H2O_BIN, "-m", "worker", "-c", self.rconf], list(self.reverse))}


class Lighttpd(Arm):
    name = "lighttpd"
    protos = ("h2",)
    reverse_why = ("not possible: mod_proxy in 1.4 opens a new origin connection per request "
                   "(no keep-alive pool)")

    def __init__(self, env):
        super().__init__(env)
        self.h2_ports = (env.port["lighttpd-h2c"], env.port["lighttpd-h2"])
        d = env.path("lighttpd")
        os.makedirs(d, exist_ok=True)
        self.conf = os.path.join(d, "lighttpd.conf")
        with open(self.conf, "w") as f:
            f.write(f"""# generated by bench/run.py: one process, /hello = a 13-byte file (static file handler)
server.document-root = "{env.docroot}"
server.bind = "127.0.0.1"
server.port = {self.h2_ports[0]}
server.max-worker = 0
server.errorlog = "{d}/error.log"
server.max-keep-alive-requests = 100000000
server.max-keep-alive-idle = 75
server.feature-flags += ("server.h2proto" => "enable", "server.h2c" => "enable")
server.modules += ("mod_openssl")
mimetype.assign = ("" => "text/plain")
$SERVER["socket"] == "127.0.0.1:{self.h2_ports[1]}" {{
    ssl.engine = "enable"
    ssl.pemfile = "{env.cert}"
    ssl.privkey = "{env.key}"
    ssl.openssl.ssl-conf-cmd = ("MinProtocol" => "TLSv1.3")
}}
""")

    def available(self):
        if not os.access(LIGHTTPD_BIN, os.X_OK):
            return False, "lighttpd not installed"
        return True, ""

    def instances(self):
        return {"main": ([LIGHTTPD_BIN, "-D", "-f", self.conf], list(self.h2_ports))}


class Bare(Arm):
    name = "bare"
    tls = False
    reverse_why = "not possible: no proxying"

    def instances(self):
        p = self.env.port
        return {"static": ([self.env.bare, str(p["bare-static"])], [p["bare-static"]]),
                "file": ([self.env.bare, str(p["bare-file"]),
                          os.path.join(self.env.docroot, FILE_NAME)], [p["bare-file"]])}

    def instance_for(self, row):
        return "static" if ROWS[row][0] == "static" else "file"

    def url(self, row):
        if ROWS[row][0] == "static":
            return f"http://127.0.0.1:{self.env.port['bare-static']}/hello"
        return f"http://127.0.0.1:{self.env.port['bare-file']}/{FILE_NAME}"


# --------------------------------------------------------------------------- processes
