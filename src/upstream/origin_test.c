/* Unit tests of upstream/origin.c without sockets: the h2/h3 ring lends its bytes like the h1
 * codec does (one contiguous region at a time, the next only after consume, across the wrap),
 * on_end waits until every byte was lent, an overrun of the window is an error, the error
 * kinds' blame rules per protocol, and the framing each protocol announces. */
#include "origin.c"

#include "core/test.h"

static char got_buf[2 * FY_H2C_STREAM_WINDOW];

typedef struct owner {
    char *got;
    size_t got_n;
    const char *lent;
    size_t lent_n;
    int datas, ends, errors;
    bool consume_inside; /* consume every piece from inside on_data */
    fy_origin_stream_t *os;
} owner_t;

static void o_head(void *ud, int status, fy_headers_t *hs, bool end)
{
    (void)ud, (void)status, (void)hs, (void)end;
}
static void o_data(void *ud, const char *p, size_t n)
{
    owner_t *o = ud;
    CHECK(o->lent_n == 0); /* never a second piece before the first was consumed */
    o->datas++;
    memcpy(o->got + o->got_n, p, n);
    o->got_n += n;
    o->lent = p;
    o->lent_n = n;
    if (o->consume_inside) {
        o->lent_n = 0;
        fy_origin_stream_consume(o->os, n);
    }
}
static void o_end(void *ud, fy_headers_t *t)
{
    owner_t *o = ud;
    (void)t;
    o->ends++;
}
static void o_error(void *ud, int kind, uint64_t code, const char *why)
{
    owner_t *o = ud;
    (void)code, (void)why;
    CHECK_EQ_INT(kind, FY_CLIENT_PROTOCOL);
    o->errors++;
}
static ssize_t o_body(void *ud, char *b, size_t l, const fy_headers_t **t)
{
    (void)ud, (void)b, (void)l;
    *t = NULL;
    return 0;
}
static void o_open(void *ud, const char *err)
{
    (void)ud, (void)err;
}
static void o_io(void *ud)
{
    (void)ud;
}
static const fy_origin_stream_ops_t ops = {
    {o_head, o_data, o_end, o_error, o_body, NULL}, o_open, o_io};

/* a stream as if opened on an h2 session (no codec stream: consume only moves the ring) */
static void open_fake(fy_origin_stream_t *os, owner_t *o, int64_t expect)
{
    memset(o, 0, sizeof *o);
    o->got = got_buf;
    memset(os, 0, sizeof *os);
    fy_origin_stream_init(os, &ops, o);
    o->os = os;
    os->proto = &proto_h2;
    fy_origin_stream_expect(os, expect);
}

static void consume(owner_t *o)
{
    size_t n = o->lent_n;
    o->lent_n = 0;
    fy_origin_stream_consume(o->os, n);
}

static void test_lend_and_wrap(void)
{
    fy_origin_stream_t os;
    owner_t o;
    open_fake(&os, &o, -1); /* unknown length: a window-sized ring */
    char buf[3000];
    for (size_t i = 0; i < sizeof buf; i++) buf[i] = (char)('a' + i % 26);
    size_t sent = 0;
    /* fill most of the ring, consume part, then write across the wrap */
    size_t cap = FY_H2C_STREAM_WINDOW;
    while (sent + sizeof buf <= cap - 4000) {
        mux_on_data(&os, buf, sizeof buf);
        sent += sizeof buf;
    }
    CHECK_EQ_INT(o.datas, 1); /* one lend until consumed */
    CHECK_EQ_INT(o.lent_n, sizeof buf);
    consume(&o); /* the rest is lent at once, in one region (no wrap yet) */
    CHECK_EQ_INT(o.datas, 2);
    CHECK_EQ_INT(o.lent_n, sent - sizeof buf);
    size_t wrap_at = sent; /* where the ring's next bytes go */
    mux_on_data(&os, buf, sizeof buf);
    mux_on_data(&os, buf, sizeof buf); /* past the ring's end: wraps to its start */
    sent += 2 * sizeof buf;
    CHECK(sent > cap);
    consume(&o);
    CHECK_EQ_INT(o.datas, 3);
    CHECK_EQ_INT(o.lent_n, cap - wrap_at); /* up to the ring's end only */
    t_on_end(&os, &(fy_headers_t){0});
    CHECK_EQ_INT(o.ends, 0); /* bytes not lent yet: the end waits */
    consume(&o);
    CHECK_EQ_INT(o.datas, 4);
    CHECK_EQ_INT(o.ends, 1); /* with the last region outstanding, as h1 does */
    consume(&o);
    CHECK_EQ_INT(o.got_n, sent);
    for (size_t i = 0; i < o.got_n; i++) CHECK(o.got[i] == buf[(i % sizeof buf)]);
    CHECK_EQ_INT(o.errors, 0);
    CHECK_EQ_INT(os.rb_count, 0);
    fy_origin_stream_free(&os);
}

static void test_small_ring_and_overrun(void)
{
    fy_origin_stream_t os;
    owner_t o;
    open_fake(&os, &o, 10); /* tiny response: a pool chunk */
    CHECK(os.rb == NULL);
    mux_on_data(&os, "0123456789", 10);
    CHECK(os.rb_pooled && os.rb_cap == FY_CHUNK_SIZE);
    CHECK_STRN(o.lent, o.lent_n, "0123456789");
    static char big[FY_CHUNK_SIZE];
    mux_on_data(&os, big, sizeof big); /* more than the ring holds while unconsumed */
    CHECK_EQ_INT(o.errors, 1);
    fy_origin_stream_free(&os);
}

static void test_consume_inside(void)
{
    fy_origin_stream_t os;
    owner_t o;
    open_fake(&os, &o, -1);
    o.consume_inside = true;
    for (int i = 0; i < 100; i++) mux_on_data(&os, "abcdefgh", 8);
    t_on_end(&os, &(fy_headers_t){0});
    CHECK_EQ_INT(o.got_n, 800);
    CHECK_EQ_INT(o.ends, 1);
    CHECK_EQ_INT(os.rb_count, 0);
    fy_origin_stream_free(&os);
}

static void test_rules(void)
{
    CHECK(!proto_h1.framing.lowercase && proto_h1.framing.upgrade && !proto_h1.framing.te_trailers);
    CHECK(proto_h2.framing.lowercase && !proto_h2.framing.upgrade && proto_h2.framing.te_trailers);
    CHECK(proto_h3.framing.lowercase && !proto_h3.framing.upgrade);
    /* h1: the codec says whose fault it was (code 1), before or after the head */
    CHECK(proto_h1.blames(FY_CLIENT_CONN, 1, false) && proto_h1.blames(FY_CLIENT_CONN, 1, true));
    CHECK(!proto_h1.blames(FY_CLIENT_CONN, 0, false));
    /* h2/h3: refused streams were not processed; after the head nothing counts */
    CHECK(!proto_h2.blames(FY_CLIENT_REFUSED, 7, false));
    CHECK(proto_h2.blames(FY_CLIENT_RESET, 2, false) && !proto_h2.blames(FY_CLIENT_RESET, 2, true));
    CHECK(proto_h3.blames(FY_CLIENT_CONN, 0, false));
    /* nothing open: closing, consuming and resuming are no-ops */
    fy_origin_stream_t os;
    owner_t o;
    memset(&o, 0, sizeof o);
    o.got = got_buf;
    memset(&os, 0, sizeof os);
    fy_origin_stream_init(&os, &ops, &o);
    fy_origin_stream_consume(&os, 5);
    fy_origin_stream_resume(&os);
    fy_origin_stream_close(&os, true);
    CHECK(!fy_origin_stream_sending(&os) && !fy_origin_stream_got_bytes(&os));
    fy_origin_stream_free(&os);
}

FY_TEST_MAIN(test_lend_and_wrap(); test_small_ring_and_overrun(); test_consume_inside();
             test_rules())
