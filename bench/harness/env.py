"""bench/run: The run's environment (temp dir, tools, files) and the shared origin."""
from harness.common import *  # noqa: F401,F403

# ----------------------------------------------------------------------------- environment

class Env:
    def __init__(self, args, modes):
        self.args = args
        self.dir = tempfile.mkdtemp(prefix="ferry-bench-")
        try:
            self._init(args, modes)
        except BaseException:  # sys.exit and errors alike: leave no temp dir behind
            shutil.rmtree(self.dir, ignore_errors=True)
            raise

    def _init(self, args, modes):
        os.chmod(self.dir, 0o755)
        self.cert, self.key = self.path("cert.pem"), self.path("key.pem")
        self.pem = self.path("cert+key.pem")
        self.docroot = self.path("docroot")
        os.mkdir(self.docroot)
        os.chmod(self.docroot, 0o755)
        self.write("hello", HELLO)
        blob = b"".join(hashlib.sha256(str(i).encode()).digest() for i in range(128))
        self.write("file-4k.bin", blob)
        self.write("body-64k.bin", blob * 16)
        self.write("body-256k.bin", blob * 64)
        if any(m in ("file-100m", "slow-consumer") for m in modes):
            chunk = blob * 256  # 1 MiB
            with open(os.path.join(self.docroot, "file-100m.bin"), "wb") as f:
                for _ in range(100):
                    f.write(chunk)
        r = run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                 "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", self.key, "-out", self.cert,
                 "-days", "30", "-subj", "/CN=localhost",
                 "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"], timeout=60)
        if r.returncode != 0:
            sys.exit("openssl failed: " + r.stderr)
        with open(self.pem, "w") as f:
            f.write(open(self.cert).read() + open(self.key).read())
        self.bare = cc(os.path.join(HERE, "bare.c"), self.path("bare"))
        self.echo = cc(os.path.join(HERE, "echo.c"), self.path("echo"), ["-lcrypto"])
        self.load = args.load
        self.h3_origin = "reverse-h3" in modes
        # ferry-load speaks h3 once tools/load/h3.c is in; before, it says "not supported"
        try:  # one without h3 exits at once; one with h3 may try to connect for a while
            r = run([self.load, "h3://127.0.0.1:9/", "-n", "1", "--timeout", "1s", "--insecure",
                     "--json"], timeout=5)
            self.load_h3 = "not supported" not in r.stderr
        except subprocess.TimeoutExpired:
            self.load_h3 = True
        self.ferry = None
        if os.access(args.ferry, os.X_OK):  # measure a copy: others rebuild build/ferry
            self.ferry = self.path("ferry")
            shutil.copy2(args.ferry, self.ferry)
            with open(self.ferry, "rb") as f:
                self.ferry_sha = hashlib.sha256(f.read()).hexdigest()

    def path(self, *p):
        return os.path.join(self.dir, *p)

    def write(self, name, data):
        with open(os.path.join(self.docroot, name), "wb") as f:
            f.write(data)

    def conf(self, name, text):
        p = self.path(name)
        with open(p, "w") as f:
            f.write(text)
        return p

    def cleanup(self):
        if self.args.keep_tmp:
            log(f"kept temp dir {self.dir}")
        else:
            shutil.rmtree(self.dir, ignore_errors=True)


class Origin:
    """The one shared origin of the proxy and L4 modes, pinned to CPU 1 with the load:
    nginx (h1, h2c, h2 TLS, h1 TLS), a TCP and a UDP echo server."""

    def __init__(self, env):
        self.env = env
        self.servers = []
        self.started = False
        self.h3_env = None

    def _setup(self):
        """Ports are picked when the origin first starts (an hour into `bench/run all`), so
        another process cannot have taken them since."""
        env = self.env
        self.port = {k: free_port() for k in ("h1", "h2c", "h2-tls", "tls", "tcp", "udp", "ws",
                                              "forge")}
        # the forging origin: one server on FORGE_HOSTS loopback addresses, its certificate
        # naming them all; the intercepting proxies verify it with origin-ca.pem
        self.forge_cert, self.forge_key = env.path("forge-cert.pem"), env.path("forge-key.pem")
        ips = ",".join(f"IP:127.0.1.{i}" for i in range(1, FORGE_HOSTS + 1))
        r = run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                 "-nodes", "-keyout", self.forge_key, "-out", self.forge_cert, "-days", "30",
                 "-subj", "/CN=forge", "-addext", "subjectAltName=" + ips], timeout=60)
        if r.returncode != 0:
            raise OSError("openssl (forging origin certificate): " + r.stderr.strip()[-200:])
        self.ca_bundle = env.path("origin-ca.pem")
        with open(self.ca_bundle, "w") as f:
            f.write(open(env.cert).read() + open(self.forge_cert).read())
        forge_listen = "\n".join(f"        listen 127.0.1.{i}:{self.port['forge']} ssl backlog=4096;"
                                 for i in range(1, FORGE_HOSTS + 1))
        d = env.path("origin")
        os.makedirs(d, exist_ok=True)
        temps = "\n".join(f"    {k}_temp_path {d}/{k};" for k in
                          ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))
        p = self.port
        env.conf("origin/nginx.conf", f"""# generated by bench/run: the shared origin
worker_processes 1;
daemon off;
master_process off;
pid {d}/nginx.pid;
error_log {d}/error.log warn;
events {{ worker_connections 16384; }}
http {{
    access_log off;
{temps}
    sendfile on;
    tcp_nodelay on;
    keepalive_requests 100000000;
    keepalive_timeout 300s;
    http2_max_requests 100000000;
    http2_max_concurrent_streams 1024;
    client_max_body_size 0;
    ssl_protocols TLSv1.3;
    ssl_certificate {env.cert};
    ssl_certificate_key {env.key};
    server {{
        listen 127.0.0.1:{p['h1']} backlog=4096;
        listen 127.0.0.1:{p['h2c']} http2 backlog=4096;
        listen 127.0.0.1:{p['h2-tls']} ssl http2 backlog=4096;
        listen 127.0.0.1:{p['tls']} ssl backlog=4096;
        root {env.docroot};
        location = /hello {{ default_type text/plain; return 200 "Hello, world!"; }}
    }}
    server {{
{forge_listen}
        ssl_certificate {self.forge_cert};
        ssl_certificate_key {self.forge_key};
        location = /hello {{ default_type text/plain; return 200 "Hello, world!"; }}
    }}
}}
""")
        self.servers = [
            Server("origin", [NGINX, "-p", d, "-e", f"{d}/error.log", "-c", f"{d}/nginx.conf"],
                   [p["h1"], p["h2c"], p["h2-tls"], p["tls"]], env.path("origin.log"), cpu=LOAD_CPU),
            Server("echo-tcp", [env.echo, "tcp", str(p["tcp"])], [p["tcp"]],
                   env.path("echo-tcp.log"), cpu=LOAD_CPU),
            Server("echo-udp", [env.echo, "udp", str(p["udp"])], [], env.path("echo-udp.log"),
                   cpu=LOAD_CPU),
            Server("echo-ws", [env.echo, "ws", str(p["ws"])], [p["ws"]], env.path("echo-ws.log"),
                   cpu=LOAD_CPU)]
        if env.h3_origin:  # the HTTP/3 origin of reverse-h3: Caddy (h1, h2, h3 on one port)
            p["h3"] = free_port()
            cd = env.path("origin-caddy")
            os.makedirs(cd, exist_ok=True)
            conf = env.conf("origin-caddy/Caddyfile", f"""{{
    admin off
    auto_https off
    servers 127.0.0.1:{p['h3']} {{
        protocols h1 h2 h3
    }}
}}
https://127.0.0.1:{p['h3']} {{
    bind 127.0.0.1
    tls {env.cert} {env.key} {{
        protocols tls1.3
    }}
    respond /hello "Hello, world!" 200
}}
""")
            self.servers.append(Server("origin-h3", [CADDY, "run", "--adapter", "caddyfile",
                                                     "--config", conf],
                                       [p["h3"]], env.path("origin-h3.log"), cpu=LOAD_CPU))
            self.h3_env = {"GOMAXPROCS": "1", "HOME": cd, "XDG_DATA_HOME": cd,
                           "XDG_CONFIG_HOME": cd}

    def start(self):
        if self.started:
            return None
        self.stop()  # a failed earlier attempt
        self._setup()
        for s in self.servers:
            old = dict(os.environ)
            if s.name == "origin-h3":
                os.environ.update(self.h3_env)
            try:
                err = s.start()
            finally:
                os.environ.clear()
                os.environ.update(old)
            if err:
                return f"{s.name}: {err}"
        self.started = True
        return None

    def pids(self):
        return [s.proc.pid for s in self.servers if s.proc is not None]

    def stop(self):
        for s in self.servers:
            if s.proc is not None:
                s.stop()
