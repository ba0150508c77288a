"""ferry-load h3:// in open loop (--rate, tools/load/h3.c) against ferry's HTTP/3 listener."""
from test_load import BODY_LEN, assert_clean, load


def test_h3_load_open_loop_rate(server):
    srv = server("""
data-dir: {data}
listeners:
  - address: 127.0.0.1:{port}
    protocols: [h1, h3]
    tls: self-signed
routes:
  - respond:
      status: 200
      body: "hello load\\n"
""")
    rc, rep = load(f"h3://127.0.0.1:{srv.port}/", "--insecure", "-c", 2, "-t", 2, "--rate", 400,
                   "-d", 1, "--expect-bytes", BODY_LEN, expect_rc=0)
    assert_clean(rep)
    assert rep["rate"] == 400
    # the schedule issues about rate x duration (a margin for the start and the last tick)
    assert 300 <= rep["requests"] <= 440, rep["requests"]


def test_h3_load_open_loop_exact_total(server):
    """-n with --rate: exactly that many requests, then the run ends."""
    srv = server("""
data-dir: {data}
listeners:
  - address: 127.0.0.1:{port}
    protocols: [h1, h3]
    tls: self-signed
routes:
  - respond: {{status: 200, body: "hello load\\n"}}
""")
    rc, rep = load(f"h3://127.0.0.1:{srv.port}/", "--insecure", "-c", 2, "--rate", 1000,
                   "-n", 300, "--expect-bytes", BODY_LEN, expect_rc=0)
    assert_clean(rep, 300)
