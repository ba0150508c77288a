"""bench/run: The arms: how each server (Ferry, nginx, HAProxy, Caddy, h2o, lighttpd, bare, mitmdump) is configured and started."""
from harness.common import *  # noqa: F401,F403
from harness.env import *  # noqa: F401,F403

# ----------------------------------------------------------------------------- arms
# plan(mode, variant) -> (instance key, argv, ports, url, env) or raises NotPossible.
# One instance (a generated config) per arm × mode × origin protocol.

def ports_for(arm, key):
    cache = arm.ports.setdefault(key, {})
    return lambda name: cache.setdefault(name, free_port())


def client_url(scheme, port, path):
    return {"h1": f"http://127.0.0.1:{port}{path}", "h1-tls": f"https://127.0.0.1:{port}{path}",
            "h2c": f"h2c://127.0.0.1:{port}{path}", "h2-tls": f"h2://127.0.0.1:{port}{path}",
            "tcp": f"tcp://127.0.0.1:{port}", "tls": f"tls://127.0.0.1:{port}", "udp": f"udp://127.0.0.1:{port}",
            "ws": f"ws://127.0.0.1:{port}{path}", "h3": f"h3://127.0.0.1:{port}{path}"}[scheme]


class Arm:
    name = ""

    def __init__(self, env, origin):
        self.env, self.origin = env, origin
        self.ports = {}

    def available(self):
        b = BIN.get(self.name)
        if b and not os.access(b, os.X_OK):
            return f"{b} not installed"
        return None

    def plan(self, mode, variant):
        kind, path = MODES[mode][0], MODES[mode][1]
        scheme, oproto = V[variant][1], V[variant][2]
        if scheme == "h3" and not self.env.load_h3 and self.name in ("ferry", "caddy"):
            raise NotPossible("this ferry-load has no HTTP/3 client"
                              + (" (Caddy 2.6 serves h3)" if self.name == "caddy" else ""))
        if scheme == "h3" and self.name not in ("ferry", "caddy"):
            raise NotPossible({"nginx": "nginx 1.22 has no HTTP/3 (QUIC came in 1.25)",
                               "haproxy": "Debian's HAProxy 2.6 is built without QUIC",
                               "lighttpd": "lighttpd 1.4 has no HTTP/3",
                               "h2o": "h2o 2.2 has no HTTP/3",
                               "bare": "plain HTTP/1.1 only"}[self.name])
        if oproto == "h3" and self.name not in ("ferry", "caddy"):
            raise NotPossible({"nginx": "nginx 1.22 has no HTTP/3 (QUIC came in 1.25)",
                               "haproxy": "Debian's HAProxy 2.6 is built without QUIC",
                               "lighttpd": "lighttpd 1.4 has no HTTP/3",
                               "h2o": "h2o 2.2 has no HTTP/3",
                               "bare": "does not proxy"}[self.name])
        key = f"{mode}:{oproto or 'server'}"
        if kind in ("mitm", "forge"):
            return self.mitm(mode, key, scheme, oproto, path)
        if kind in ("server", "idle"):
            return self.server(mode, key, scheme, path)
        if kind in ("proxy", "slow", "ws"):
            return self.proxy(mode, key, scheme, oproto, path)
        if kind == "reload":
            if self.name != "ferry":
                raise NotPossible("Ferry's own row: reloads of Ferry against none")
            return (self.proxy(mode, key, scheme, oproto, path) if oproto
                    else self.server(mode, key, scheme, path))
        if kind == "l4":
            return self.l4(mode, key, scheme, oproto)
        raise NotPossible("not possible")

    def server(self, mode, key, scheme, path):
        raise NotPossible("not a web server")

    def proxy(self, mode, key, scheme, oproto, path):
        raise NotPossible("does not proxy")

    def l4(self, mode, key, scheme, oproto):
        raise NotPossible("no layer-4 proxy")

    def mitm(self, mode, key, scheme, oproto, path):
        raise NotPossible("not an intercepting proxy")

    def mitm_url(self, scheme, oport, port, path, host="127.0.0.1"):
        """The origin's URL (origin port `oport`), reached through the explicit proxy on `port`."""
        return (client_url(scheme, oport, path).replace("127.0.0.1", host, 1),
                ["--proxy", f"127.0.0.1:{port}"])


class Ferry(Arm):
    name = "ferry"
    # as the peers: no request-count cap on keep-alive connections, bodies up to 1 GiB
    LIMITS = "limits: {keepalive-requests: 1000000000, body-size: 1g}\n"

    def available(self):
        return None if self.env.ferry else f"not built ({self.env.args.ferry} missing)"

    def _inst(self, key, body, P):
        conf = self.env.conf(f"ferry-{key.replace(':', '-')}.yaml", f"""workers: 1
listeners:
  - address: 127.0.0.1:{P('plain')}
  - address: 127.0.0.1:{P('tls')}
    tls: {{cert: {self.env.cert}, key: {self.env.key}}}
{body}log: {{level: warn}}
""")
        return [self.env.ferry, "run", "-c", conf], [P("plain"), P("tls")]

    def _url(self, scheme, P, path):
        if scheme == "h3":
            return client_url(scheme, P("h3"), path)
        return client_url(scheme, P("plain") if scheme in ("h1", "h2c", "ws") else P("tls"), path)

    def server(self, mode, key, scheme, path):
        P = ports_for(self, key)
        routes = f"""routes:
  - match: {{path: /hello}}
    respond: {{status: 200, headers: {{content-type: text/plain}}, body: "Hello, world!"}}
  - static: {{root: {self.env.docroot}}}
"""
        if scheme == "h3":
            # its own instance and listener: h3 on a TLS listener adds Alt-Svc to that
            # listener's TCP responses, which the other variants must not carry
            key = key + ":h3"
            P = ports_for(self, key)
            conf = self.env.conf(f"ferry-{key.replace(':', '-')}.yaml", f"""workers: 1
listeners:
  - address: 127.0.0.1:{P('h3')}
    protocols: [h1, h2, h3]
    tls: {{cert: {self.env.cert}, key: {self.env.key}}}
{self.LIMITS}{routes}log: {{level: warn}}
""")
            r = run([self.env.ferry, "check", "-c", conf], timeout=30)
            if r.returncode != 0:
                msg = (r.stderr or r.stdout).strip().splitlines()
                raise NotPossible("this ferry has no HTTP/3 (`ferry check`: "
                                  + (msg[0][-120:] if msg else f"exit {r.returncode}") + ")")
            return key, [self.env.ferry, "run", "-c", conf], [P("h3")], self._url(scheme, P, path), None
        argv, ports = self._inst(key, self.LIMITS + routes, P)
        return key, argv, ports, self._url(scheme, P, path), None

    def proxy(self, mode, key, scheme, oproto, path):
        P = ports_for(self, key)
        srv = {"h1": f"http://127.0.0.1:{self.origin.port['h1']}",
               "ws": f"http://127.0.0.1:{self.origin.port['ws']}",
               "h2c": f"h2c://127.0.0.1:{self.origin.port['h2c']}",
               "h2-tls": f"h2://127.0.0.1:{self.origin.port['h2-tls']}",
               "h3": f"h3://127.0.0.1:{self.origin.port.get('h3', 0)}"}[oproto]
        if scheme == "h3" or oproto == "h3":
            # its own instance with an h1,h2,h3 TLS listener; `ferry check` says whether this
            # binary has h3 listeners and h3:// origins
            key = f"{key}:{scheme}"
            P = ports_for(self, key)
            conf = self.env.conf(f"ferry-{key.replace(':', '-')}.yaml", f"""workers: 1
listeners:
  - address: 127.0.0.1:{P('plain')}
  - address: 127.0.0.1:{P('h3')}
    protocols: [h1, h2, h3]
    tls: {{cert: {self.env.cert}, key: {self.env.key}}}
{self.LIMITS}upstreams:
  - name: app
    servers: ["{srv}"]
    ca: {self.env.cert}
routes:
  - proxy: app
log: {{level: warn}}
""")
            r = run([self.env.ferry, "check", "-c", conf], timeout=30)
            if r.returncode != 0:
                msg = (r.stderr or r.stdout).strip().splitlines()
                raise NotPossible("`ferry check`: " + (msg[0].split("': ", 1)[-1][-150:] if msg
                                                       else f"exit {r.returncode}"))
            return (key, [self.env.ferry, "run", "-c", conf], [P("plain"), P("h3")],
                    client_url(scheme, P("plain") if scheme == "h1" else P("h3"), path), None)
        argv, ports = self._inst(key, f"""{self.LIMITS}upstreams:
  - name: app
    servers: ["{srv}"]
    ca: {self.env.cert}
routes:
  - proxy: app
""", P)
        return key, argv, ports, self._url(scheme, P, path), None

    def mitm(self, mode, key, scheme, oproto, path):
        """An `intercept` listener from a config (the `ferry mitm` one-liner has no rules)."""
        if oproto == "tls-h1":
            raise NotPossible("Ferry mirrors the origin's protocol end to end (h2 to the client "
                              "only when the origin has it, and then h2 to the origin)")
        P = ports_for(self, key)
        d = self.env.path("ferry-" + key.replace(":", "-"))
        os.makedirs(d, exist_ok=True)
        rules = {"mitm-lite": """  rules:  # interception on, no rule matches
    - match: {host: no-such-host.invalid}
      response-headers: {append: {x-bench: "1"}}
""", "mitm-full": """  rules:  # one header appended each way
    - request-headers: {append: {x-bench: "1"}}
      response-headers: {append: {x-bench: "1"}}
""", "mitm-har": f"""  capture: {{har: {d}/flows.har}}
"""}.get(mode, "")
        if mode == "mitm-forge":
            rules = "  cert-cache: 1\n" if oproto == "forge-cold" else ""
        conf = self.env.conf(f"ferry-{key.replace(':', '-')}.yaml", f"""workers: 1
listeners:
  - address: 127.0.0.1:{P('proxy')}
    kind: intercept
{self.LIMITS}intercept:
  ca-dir: {d}
  upstream-ca: {self.origin.ca_bundle}
{rules}log: {{level: warn}}
""")
        r = run([self.env.ferry, "check", "-c", conf], timeout=30)
        if r.returncode != 0:
            msg = (r.stderr or r.stdout).strip().splitlines()
            raise NotPossible("this ferry has no interception (`ferry check`: "
                              + (msg[0][-120:] if msg else f"exit {r.returncode}") + ")")
        if oproto.startswith("forge"):
            url = self.mitm_url(scheme, self.origin.port["forge"], P("proxy"), path, "127.0.1.1")
        else:
            op = self.origin.port["tls" if oproto == "tls" else "h2-tls"]
            url = self.mitm_url(scheme, op, P("proxy"), path)
        return key, [self.env.ferry, "run", "-c", conf], [P("proxy")], url, {"HOME": d}

    def l4(self, mode, key, scheme, oproto):
        # Ferry's L4 comes from its own branch (docs/CONFIG.md `l4:` there: listen, mode
        # tcp|udp|tls-passthrough|..., target HOST:PORT). Until it is merged `ferry check`
        # rejects the key and the cell says not possible, with the error.
        P = ports_for(self, key)
        target = {"tcp": self.origin.port["tcp"], "udp": self.origin.port["udp"],
                  "tls-pass": self.origin.port["tls"], "tls-term": self.origin.port["tcp"]}[oproto]
        lmode = {"tcp": "tcp", "udp": "udp", "tls-pass": "tls-passthrough",
                 "tls-term": "tls-terminate"}[oproto]
        tls = (f"\n    tls: {{cert: {self.env.cert}, key: {self.env.key}, min-version: '1.3'}}"
               if oproto == "tls-term" else "")
        conf = self.env.conf(f"ferry-{key.replace(':', '-')}.yaml", f"""workers: 1
l4:
  - listen: 127.0.0.1:{P('l4')}
    mode: {lmode}
    target: 127.0.0.1:{target}{tls}
log: {{level: warn}}
""")
        r = run([self.env.ferry, "check", "-c", conf], timeout=30)
        if r.returncode != 0:
            msg = (r.stderr or r.stdout).strip().splitlines()
            raise NotPossible("ferry has no L4 proxy yet (`ferry check`: "
                              + (msg[0][-120:] if msg else f"exit {r.returncode}") + ")")
        url = client_url(scheme, P("l4"), "/hello")
        return (key, [self.env.ferry, "run", "-c", conf], [] if oproto == "udp" else [P("l4")],
                url, None)


class Nginx(Arm):
    name = "nginx"

    def _conf(self, key, http, stream=""):
        d = self.env.path("nginx-" + key.replace(":", "-"))
        os.makedirs(d, exist_ok=True)
        temps = "\n".join(f"    {k}_temp_path {d}/{k};" for k in
                          ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))
        load = f"load_module {STREAM_MOD};\n" if stream else ""
        http_block = f"""http {{
    access_log off;
{temps}
    sendfile on;
    tcp_nopush on;
    tcp_nodelay on;
    keepalive_requests 100000000;
    http2_max_requests 100000000;
    keepalive_timeout 75s;
    client_max_body_size 0;
    default_type application/octet-stream;
    ssl_protocols TLSv1.3;
    ssl_certificate {self.env.cert};
    ssl_certificate_key {self.env.key};
{http}
}}
""" if http else ""
        self.env.conf(os.path.join(d, "nginx.conf"), f"""# generated by bench/run ({key})
{load}worker_processes 1;
daemon off;
master_process off;
pid {d}/nginx.pid;
error_log {d}/error.log warn;
events {{ worker_connections 16384; }}
{http_block}{stream}""")
        return [NGINX, "-p", d, "-e", f"{d}/error.log", "-c", f"{d}/nginx.conf"]

    def server(self, mode, key, scheme, path):
        P = ports_for(self, key)
        argv = self._conf(key, f"""    server {{
        listen 127.0.0.1:{P('plain')} backlog=4096;
        listen 127.0.0.1:{P('h2c')} http2 backlog=4096;
        listen 127.0.0.1:{P('tls')} ssl http2 backlog=4096;
        root {self.env.docroot};
        location = /hello {{ default_type text/plain; return 200 "Hello, world!"; }}
    }}""")
        port = {"h1": P("plain"), "ws": P("plain"), "h2c": P("h2c")}.get(scheme, P("tls"))
        return key, argv, [P("plain"), P("h2c"), P("tls")], client_url(scheme, port, path), None

    def proxy(self, mode, key, scheme, oproto, path):
        if oproto not in ("h1", "ws"):
            raise NotPossible("proxy_pass speaks HTTP/1.x to origins only")
        P = ports_for(self, key)
        conn = ('proxy_set_header Upgrade $http_upgrade;\n            proxy_set_header Connection "upgrade";'
                if oproto == "ws" else 'proxy_set_header Connection "";')
        argv = self._conf(key, f"""    proxy_buffering {'off' if mode == 'slow-consumer' else 'on'};
    upstream app {{ server 127.0.0.1:{self.origin.port[oproto]}; keepalive 512; }}
    server {{
        listen 127.0.0.1:{P('plain')} backlog=4096;
        listen 127.0.0.1:{P('tls')} ssl http2 backlog=4096;
        location / {{
            proxy_pass http://app;
            proxy_http_version 1.1;
            {conn}
        }}
    }}""")
        port = P("plain") if scheme in ("h1", "ws") else P("tls")
        return key, argv, [P("plain"), P("tls")], client_url(scheme, port, path), None

    def l4(self, mode, key, scheme, oproto):
        if not os.path.exists(STREAM_MOD):
            raise NotPossible("libnginx-mod-stream not installed")
        P = ports_for(self, key)
        target = {"tcp": self.origin.port["tcp"], "udp": self.origin.port["udp"],
                  "tls-pass": self.origin.port["tls"], "tls-term": self.origin.port["tcp"]}[oproto]
        udp = " udp" if oproto == "udp" else ""
        ssl = (f" ssl;\n        ssl_protocols TLSv1.3;\n        ssl_certificate {self.env.cert};\n"
               f"        ssl_certificate_key {self.env.key}" if oproto == "tls-term" else "")
        argv = self._conf(key, "", f"""stream {{
    server {{
        listen 127.0.0.1:{P('l4')}{udp}{'' if udp else ' backlog=4096'}{ssl};
        proxy_pass 127.0.0.1:{target};{'''
        proxy_responses 1;
        proxy_timeout 60s;''' if udp else ''}
    }}
}}
""")
        return key, argv, ([] if udp else [P("l4")]), client_url(scheme, P("l4"), "/hello"), None


class Haproxy(Arm):
    name = "haproxy"

    def _conf(self, key, body):
        conf = self.env.conf(f"haproxy-{key.replace(':', '-')}.cfg", f"""# generated by bench/run ({key})
global
    nbthread 1
    maxconn 9500  # fds: 2 per connection + margin under a 20000 hard limit
    tune.bufsize 16384
defaults
    timeout connect 5s
    timeout client 75s
    timeout server 75s
    timeout http-keep-alive 75s
    timeout tunnel 75s
{body}""")
        return [HAPROXY, "-db", "-f", conf]

    def _binds(self, P):
        return (f"    bind 127.0.0.1:{P('plain')}\n    bind 127.0.0.1:{P('h2c')} proto h2\n"
                f"    bind 127.0.0.1:{P('tls')} ssl crt {self.env.pem} alpn h2,http/1.1 ssl-min-ver TLSv1.3\n")

    def _url(self, scheme, P, path):
        return client_url(scheme, {"h1": P("plain"), "ws": P("plain"), "h2c": P("h2c")}.get(scheme, P("tls")), path)

    def server(self, mode, key, scheme, path):
        if mode == "file-100m":
            raise NotPossible("serves no files (http-request return holds one buffer)")
        P = ports_for(self, key)
        argv = self._conf(key, f"""frontend web
    mode http
    option http-keep-alive
{self._binds(P)}    http-request return status 200 content-type text/plain string "Hello, world!" if {{ path /hello }}
    http-request return status 200 content-type application/octet-stream file {self.env.docroot}/file-4k.bin if {{ path /file-4k.bin }}
    http-request return status 404
""")
        return key, argv, [P("plain"), P("h2c"), P("tls")], self._url(scheme, P, path), None

    def proxy(self, mode, key, scheme, oproto, path):
        P = ports_for(self, key)
        srv = {"h1": f"127.0.0.1:{self.origin.port['h1']}",
               "ws": f"127.0.0.1:{self.origin.port['ws']}",
               "h2c": f"127.0.0.1:{self.origin.port['h2c']} proto h2",
               "h2-tls": f"127.0.0.1:{self.origin.port['h2-tls']} ssl verify none alpn h2"}[oproto]
        argv = self._conf(key, f"""frontend web
    mode http
    option http-keep-alive
{self._binds(P)}    default_backend app
backend app
    mode http
    http-reuse always
    server origin {srv}
""")
        return key, argv, [P("plain"), P("h2c"), P("tls")], self._url(scheme, P, path), None

    def l4(self, mode, key, scheme, oproto):
        if oproto == "udp":
            raise NotPossible("HAProxy 2.6 does not proxy UDP")
        P = ports_for(self, key)
        target = self.origin.port["tls" if oproto == "tls-pass" else "tcp"]
        ssl = (f" ssl crt {self.env.pem} ssl-min-ver TLSv1.3" if oproto == "tls-term" else "")
        argv = self._conf(key, f"""frontend l4
    mode tcp
    bind 127.0.0.1:{P('l4')}{ssl}
    default_backend echo
backend echo
    mode tcp
    server origin 127.0.0.1:{target}
""")
        return key, argv, [P("l4")], client_url(scheme, P("l4"), "/hello"), None


class Caddy(Arm):
    name = "caddy"

    def _run(self, key, text):
        d = self.env.path("caddy-" + key.replace(":", "-"))
        os.makedirs(d, exist_ok=True)
        conf = self.env.conf(os.path.join(d, "Caddyfile"), text)
        # one OS thread running Go code, data dirs in the temp dir
        env = {"GOMAXPROCS": "1", "HOME": d, "XDG_DATA_HOME": d, "XDG_CONFIG_HOME": d}
        return [CADDY, "run", "--adapter", "caddyfile", "--config", conf], env

    def _globals(self, P):
        return f"""{{
    admin off
    auto_https off
    servers 127.0.0.1:{P('plain')} {{
        protocols h1 h2c
    }}
    servers 127.0.0.1:{P('tls')} {{
        protocols h1 h2
    }}
}}
"""

    def _sites(self, P, body):
        return f"""http://127.0.0.1:{P('plain')} {{
    bind 127.0.0.1
{body}}}
https://127.0.0.1:{P('tls')} {{
    bind 127.0.0.1
    tls {self.env.cert} {self.env.key} {{
        protocols tls1.3
    }}
{body}}}
"""

    def _url(self, scheme, P, path):
        return client_url(scheme, P("plain") if scheme in ("h1", "h2c", "ws") else P("tls"), path)

    def server(self, mode, key, scheme, path):
        body = f"""    respond /hello "Hello, world!" 200
    root * {self.env.docroot}
    file_server
"""
        if scheme == "h3":  # its own instance: h3 adds Alt-Svc to the TCP responses
            key = key + ":h3"
            P = ports_for(self, key)
            argv, env = self._run(key, f"""{{
    admin off
    auto_https off
    servers 127.0.0.1:{P('h3')} {{
        protocols h1 h2 h3
    }}
}}
https://127.0.0.1:{P('h3')} {{
    bind 127.0.0.1
    tls {self.env.cert} {self.env.key} {{
        protocols tls1.3
    }}
{body}}}
""")
            return key, argv, [P("h3")], client_url("h3", P("h3"), path), env
        P = ports_for(self, key)
        argv, env = self._run(key, self._globals(P) + self._sites(P, body))
        return key, argv, [P("plain"), P("tls")], self._url(scheme, P, path), env

    def proxy(self, mode, key, scheme, oproto, path):
        P = ports_for(self, key)
        up = {"h1": f"reverse_proxy 127.0.0.1:{self.origin.port['h1']}",
              "ws": f"reverse_proxy 127.0.0.1:{self.origin.port['ws']}",
              "h2c": f"reverse_proxy h2c://127.0.0.1:{self.origin.port['h2c']}",
              "h2-tls": f"""reverse_proxy https://127.0.0.1:{self.origin.port['h2-tls']} {{
        transport http {{
            tls_trusted_ca_certs {self.env.cert}
            versions 2
        }}
    }}""", "h3": f"""reverse_proxy https://127.0.0.1:{self.origin.port.get('h3', 0)} {{
        transport http {{
            tls_trusted_ca_certs {self.env.cert}
            versions 3
        }}
    }}"""}[oproto]
        if scheme == "h3":  # its own instance: h1, h2, h3 on one TLS port
            key = key + ":h3"
            P = ports_for(self, key)
            argv, env = self._run(key, f"""{{
    admin off
    auto_https off
    servers 127.0.0.1:{P('h3')} {{
        protocols h1 h2 h3
    }}
}}
https://127.0.0.1:{P('h3')} {{
    bind 127.0.0.1
    tls {self.env.cert} {self.env.key} {{
        protocols tls1.3
    }}
    {up}
}}
""")
            return key, argv, [P("h3")], client_url("h3", P("h3"), path), env
        argv, env = self._run(key, self._globals(P) + self._sites(P, f"    {up}\n"))
        return key, argv, [P("plain"), P("tls")], self._url(scheme, P, path), env

    def l4(self, mode, key, scheme, oproto):
        raise NotPossible("Debian's caddy has no layer-4 app (caddy-l4 is a plugin)")


class H2o(Arm):
    name = "h2o"

    def _conf(self, key, paths, P):
        conf = self.env.conf(f"h2o-{key.replace(':', '-')}.yaml", f"""# generated by bench/run ({key})
user: root
num-threads: 1
max-connections: 16384
http2-max-concurrent-requests-per-connection: 256
listen:
  host: 127.0.0.1
  port: {P('plain')}
listen:
  host: 127.0.0.1
  port: {P('tls')}
  ssl:
    certificate-file: {self.env.cert}
    key-file: {self.env.key}
    min-version: TLSv1.3
    ocsp-update-interval: 0
file.mime.setdefaulttype: text/plain
hosts:
  default:
    paths:
{paths}""")
        return [H2O, "-m", "worker", "-c", conf]

    def _url(self, scheme, P, path):
        return client_url(scheme, P("plain") if scheme in ("h1", "h2c", "ws") else P("tls"), path)

    def server(self, mode, key, scheme, path):
        if mode == "early-response":
            raise NotPossible("its /hello is a file, and a POST to a file is 405")
        P = ports_for(self, key)
        argv = self._conf(key, f"""      /hello:
        file.file: {self.env.docroot}/hello
      /:
        file.dir: {self.env.docroot}
""", P)
        return key, argv, [P("plain"), P("tls")], self._url(scheme, P, path), None

    def proxy(self, mode, key, scheme, oproto, path):
        if oproto not in ("h1", "ws"):
            raise NotPossible("h2o 2.2 proxies over HTTP/1.1 only")
        P = ports_for(self, key)
        ws = "        proxy.websocket: ON\n" if oproto == "ws" else ""
        argv = self._conf(key, f"""      /:
        proxy.reverse.url: http://127.0.0.1:{self.origin.port[oproto]}/
{ws}""", P)
        return key, argv, [P("plain"), P("tls")], self._url(scheme, P, path), None


class Lighttpd(Arm):
    name = "lighttpd"

    def server(self, mode, key, scheme, path):
        P = ports_for(self, key)
        d = self.env.path("lighttpd-" + key.replace(":", "-"))
        os.makedirs(d, exist_ok=True)
        conf = self.env.conf(os.path.join(d, "lighttpd.conf"), f"""# generated by bench/run ({key})
server.document-root = "{self.env.docroot}"
server.bind = "127.0.0.1"
server.port = {P('plain')}
server.max-worker = 0
server.max-fds = 16384
server.max-connections = 16384
server.errorlog = "{d}/error.log"
server.max-keep-alive-requests = 100000000
server.max-keep-alive-idle = 75
server.max-request-size = 2097151
server.feature-flags += ("server.h2proto" => "enable", "server.h2c" => "enable")
server.modules += ("mod_openssl")
mimetype.assign = ("" => "text/plain")
$SERVER["socket"] == "127.0.0.1:{P('tls')}" {{
    ssl.engine = "enable"
    ssl.pemfile = "{self.env.cert}"
    ssl.privkey = "{self.env.key}"
    ssl.openssl.ssl-conf-cmd = ("MinProtocol" => "TLSv1.3")
}}
""")
        return (key, [LIGHTTPD, "-D", "-f", conf], [P("plain"), P("tls")],
                client_url(scheme, P("plain") if scheme in ("h1", "h2c", "ws") else P("tls"), path), None)

    def proxy(self, mode, key, scheme, oproto, path):
        if oproto != "ws":
            raise NotPossible("mod_proxy in 1.4 opens a new origin connection per request "
                              "(no keep-alive pool)")
        # a WebSocket is one long-lived connection: the missing pool does not matter
        P = ports_for(self, key)
        d = self.env.path("lighttpd-" + key.replace(":", "-"))
        os.makedirs(d, exist_ok=True)
        conf = self.env.conf(os.path.join(d, "lighttpd.conf"), f"""# generated by bench/run ({key})
server.document-root = "{self.env.docroot}"
server.bind = "127.0.0.1"
server.port = {P('plain')}
server.max-worker = 0
server.max-fds = 16384
server.max-connections = 16384
server.errorlog = "{d}/error.log"
server.modules += ("mod_proxy")
proxy.server = ("" => (("host" => "127.0.0.1", "port" => {self.origin.port['ws']})))
proxy.header = ("upgrade" => "enable")
""")
        return (key, [LIGHTTPD, "-D", "-f", conf], [P("plain")],
                client_url(scheme, P("plain"), path), None)


class Bare(Arm):
    name = "bare"

    def server(self, mode, key, scheme, path):
        if scheme != "h1":
            raise NotPossible("plain HTTP/1.1 only")
        if mode in ("file-100m", "early-response"):
            raise NotPossible("holds ≤ 16 MiB, parses no bodies")
        P = ports_for(self, key)
        argv = [self.env.bare, str(P("plain"))]
        if path != "/hello":
            argv.append(self.env.docroot + path)
        return key + path, argv, [P("plain")], client_url(scheme, P("plain"), path), None

    def proxy(self, mode, key, scheme, oproto, path):
        if oproto != "ws":
            raise NotPossible("does not proxy")
        return "origin-direct", None, [], client_url(scheme, self.origin.port["ws"], path), None

    def l4(self, mode, key, scheme, oproto):
        if oproto in ("tls-pass", "tls-term"):
            raise NotPossible("the floor here would be the origin itself" if oproto == "tls-pass"
                              else "no TLS")
        # the floor: the echo origin without any proxy in between
        port = self.origin.port[oproto]
        return "origin-direct", None, [], client_url(scheme, port, "/"), None


ADDON = """# bench/run: one header appended each way (mitm-full)
def request(flow):
    flow.request.headers.add("x-bench", "1")
def response(flow):
    flow.response.headers.add("x-bench", "1")
"""


class Mitmdump(Arm):
    """mitmproxy's mitmdump as an explicit proxy (CONNECT, TLS ended with a certificate
    minted per host): mitm-lite no addon, mitm-full a 4-line addon appending one header each
    way, mitm-har `-w FILE`. Its default connection strategy (eager: origin first, its ALPN
    mirrored to the client), so it cannot do `h2 TLS → h1 TLS`."""
    name = "mitmdump"

    def mitm(self, mode, key, scheme, oproto, path):
        if MODES[mode][0] == "forge":
            raise NotPossible("Ferry only (issue 7)")
        if oproto == "tls-h1":
            raise NotPossible("mitmdump 8.1 offers the client the ALPN of the origin (h1-only "
                              "origin: http/1.1 only, with connection_strategy=lazy too) and "
                              "speaks h2 to an origin that has it")
        key = f"{key}:{oproto}"
        P = ports_for(self, key)
        d = self.env.path("mitmdump-" + key.replace(":", "-"))
        os.makedirs(d, exist_ok=True)
        argv = [MITMDUMP, "--listen-host", "127.0.0.1", "--listen-port", str(P("proxy")),
                "--set", f"confdir={d}", "--ssl-insecure", "--quiet"]
        if mode == "mitm-full":
            addon = os.path.join(d, "append_header.py")
            with open(addon, "w") as f:
                f.write(ADDON)
            argv += ["-s", addon]
        if mode == "mitm-har":
            argv += ["-w", os.path.join(d, "flows.mitm")]
        op = self.origin.port["h2-tls" if oproto == "h2-tls" else "tls"]
        return key, argv, [P("proxy")], self.mitm_url(scheme, op, P("proxy"), path), {"HOME": d}


class FerryReverse(Ferry):
    """Ferry's reverse proxy on the wires of the MITM variants (same TLS origin, no CONNECT):
    the denominator of Ferry MITM ÷ Ferry reverse, measured in the same run."""
    name = "ferry-reverse"

    def available(self):
        return Ferry.available(self)

    def mitm(self, mode, key, scheme, oproto, path):
        if MODES[mode][0] == "forge":
            raise NotPossible("not an intercepting proxy")
        key = f"{key}:reverse"
        P = ports_for(self, key)
        o = self.origin.port
        srv = {"tls": f"https://127.0.0.1:{o['tls']}", "tls-h1": f"https://127.0.0.1:{o['tls']}",
               "h2-tls": f"h2://127.0.0.1:{o['h2-tls']}"}[oproto]
        argv, ports = self._inst(key, f"""{self.LIMITS}upstreams:
  - name: app
    servers: ["{srv}"]
    ca: {self.env.cert}
routes:
  - proxy: app
""", P)
        return key, argv, ports, self._url(scheme, P, path), None


ARM_CLASSES = {"ferry": Ferry, "nginx": Nginx, "haproxy": Haproxy, "lighttpd": Lighttpd,
               "caddy": Caddy, "h2o": H2o, "bare": Bare}
