/* W3C Trace Context: the traceparent parser (the spec's valid and invalid forms), the
 * formatter, tracestate trimming, and the trace filter on an exchange (kept trace id with a
 * new parent id, generation, replacement of malformed and duplicate fields, tracestate only
 * with a valid traceparent, generate: false). */
#include <string.h>

#include "core/arena.h"
#include "core/test.h"
#include "policy/trace.h"

#define TP "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

static int parse(const char *s, fy_traceparent_t *tp)
{
    return fy_traceparent_parse(s, strlen(s), tp);
}

static void test_parse(void)
{
    fy_traceparent_t tp;
    CHECK(parse(TP, &tp) == 0);
    CHECK_EQ_INT(tp.version, 0);
    CHECK_EQ_INT(tp.trace_id[0], 0x4b);
    CHECK_EQ_INT(tp.trace_id[15], 0x36);
    CHECK_EQ_INT(tp.parent_id[0], 0x00);
    CHECK_EQ_INT(tp.parent_id[7], 0xb7);
    CHECK_EQ_INT(tp.flags, 1);
    char out[FY_TRACEPARENT_LEN + 1];
    fy_traceparent_format(&tp, out);
    CHECK(strcmp(out, TP) == 0);
    /* every nibble value in every position: the formatter's hex is the parser's */
    for (int k = 0; k < 256; k++) {
        fy_traceparent_t t = {.flags = (uint8_t)k};
        for (int i = 0; i < 16; i++) t.trace_id[i] = (uint8_t)(k + i * 17);
        for (int i = 0; i < 8; i++) t.parent_id[i] = (uint8_t)(255 - k - i * 31);
        t.trace_id[0] |= 1;
        t.parent_id[0] |= 1;
        fy_traceparent_format(&t, out);
        fy_traceparent_t back;
        CHECK(strlen(out) == FY_TRACEPARENT_LEN && parse(out, &back) == 0);
        CHECK(!memcmp(back.trace_id, t.trace_id, 16) && !memcmp(back.parent_id, t.parent_id, 8));
        CHECK(back.flags == t.flags);
    }
    /* a later version: longer, with '-' after the flags; or exactly 55 */
    CHECK(parse("cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-xyz", &tp) == 0);
    CHECK_EQ_INT(tp.version, 0xcc);
    CHECK(parse("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-09", &tp) == 0);
    CHECK_EQ_INT(tp.flags, 9);
    static const char *const bad[] = {
        "",
        "00",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0",   /* short */
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-", /* 00 is 55 exactly */
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x", /* */
        "cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x", /* no '-' after flags */
        "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",  /* version ff */
        "00-00000000000000000000000000000000-00f067aa0ba902b7-01",  /* zero trace id */
        "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",  /* zero parent id */
        "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",  /* uppercase */
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00F067AA0BA902B7-01",  /* uppercase */
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0G",  /* flags not hex */
        "0x-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",  /* version not hex */
        "00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",  /* separators */
        "00-4bf92f3577b34da6a3ce929d0e0e4736_00f067aa0ba902b7-01",  /* */
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7_01",  /* */
        "00-4bf92f3577b34da6a3ce929d0e0e473-600f067aa0ba902b7-01",  /* misplaced */
        " 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", /* leading space */
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) CHECK(parse(bad[i], &tp) < 0);
    /* an embedded NUL, byte by byte: never valid */
    char nul[FY_TRACEPARENT_LEN];
    for (size_t i = 0; i < FY_TRACEPARENT_LEN; i++) {
        memcpy(nul, TP, sizeof nul);
        nul[i] = '\0';
        CHECK(fy_traceparent_parse(nul, sizeof nul, &tp) < 0);
    }
    /* every prefix of a valid one is malformed */
    for (size_t n = 0; n < FY_TRACEPARENT_LEN; n++) CHECK(fy_traceparent_parse(TP, n, &tp) < 0);
}

static size_t trim(const char *s, size_t max)
{
    return fy_tracestate_trim(s, strlen(s), max);
}

static void test_tracestate(void)
{
    CHECK_EQ_INT(trim("a=1,b=2", 512), 7);
    CHECK_EQ_INT(trim("a=1,b=2", 6), 3);       /* "a=1" */
    CHECK_EQ_INT(trim("a=1,b=2", 2), 0);       /* nothing whole fits */
    CHECK_EQ_INT(trim("a=1 , b=2 ,", 512), 9); /* "a=1 , b=2" */
    CHECK_EQ_INT(trim(" , ,a=1", 512), 7);     /* empty members are skipped */
    CHECK_EQ_INT(trim("", 512), 0);
    CHECK_EQ_INT(trim(" ,\t,", 512), 0);
    /* 33 members: the 33rd goes */
    char many[33 * 4 + 1];
    size_t o = 0;
    for (int i = 0; i < 33; i++)
        o += (size_t)snprintf(many + o, sizeof many - o, "%c=%d,", 'a' + i % 26, i % 10);
    many[--o] = '\0';
    CHECK_EQ_INT(trim(many, 4096), 32 * 4 - 1);
}

static fy_filter_chain_t chain_for(const fy_trace_conf_t *c)
{
    fy_filter_chain_t ch = {0};
    CHECK(fy_trace_filter_add(c, &ch) == 0);
    CHECK_EQ_INT(ch.n, 1);
    CHECK_EQ_INT(ch.v[0]->ops->stage, FY_STAGE_TRACE);
    return ch;
}

static const fy_header_t *only(const fy_headers_t *hs, const char *name, int *count)
{
    const fy_header_t *h = NULL;
    *count = 0;
    for (size_t i = 0; i < hs->n; i++)
        if (hs->v[i].name.len == strlen(name) && !memcmp(hs->v[i].name.p, name, strlen(name))) {
            h = &hs->v[i];
            ++*count;
        }
    return h;
}

/* Run the filter over a request with these fields (name, value pairs, NULL-ended). */
static void run(fy_filter_chain_t *ch, fy_arena_t *a, fy_exchange_t *ex, const char *const *f)
{
    fy_arena_reset(a);
    memset(ex, 0, sizeof *ex);
    ex->arena = a;
    FY_HDR_ADD(a, &ex->req.headers, "user-agent", "t", 1);
    for (size_t i = 0; f[i]; i += 2)
        fy_headers_add(a, &ex->req.headers, f[i], strlen(f[i]), f[i + 1], strlen(f[i + 1]));
    CHECK(ch->v[0]->ops->on_request(ch->v[0], ex) == FY_FILTER_NEXT);
}

static void test_filter(void)
{
    fy_arena_t a;
    fy_arena_init(&a, NULL, 0, 0);
    fy_trace_conf_t conf = {.enabled = true, .generate = true, .tracestate_max = 512};
    fy_filter_chain_t ch = chain_for(&conf);
    fy_exchange_t ex;
    fy_traceparent_t tp;
    int n;

    /* valid: same trace id and flags, a new parent id, tracestate joined */
    run(&ch, &a, &ex,
        (const char *const[]){"Traceparent", TP, "tracestate", "a=1", "TraceState", "b=2", NULL});
    const fy_header_t *h = only(&ex.req.headers, "traceparent", &n);
    CHECK(n == 1 && h && h->value.len == FY_TRACEPARENT_LEN);
    CHECK(fy_traceparent_parse(h->value.p, h->value.len, &tp) == 0);
    CHECK(memcmp(h->value.p, TP, 36) == 0);      /* version and trace id */
    CHECK(memcmp(h->value.p + 36, TP + 36, 16)); /* a new parent id */
    CHECK(memcmp(h->value.p + 52, "-01", 3) == 0);
    CHECK(ex.trace_id && memcmp(ex.trace_id, TP + 3, 32) == 0);
    h = only(&ex.req.headers, "tracestate", &n);
    CHECK(n == 1 && h && h->value.len == 7 && !memcmp(h->value.p, "a=1,b=2", 7));
    CHECK(only(&ex.req.headers, "Traceparent", &n) == NULL && n == 0);
    CHECK(only(&ex.req.headers, "user-agent", &n) && n == 1);

    /* a field after it: the kept trace id is the received one (not what moved into its place) */
    run(&ch, &a, &ex, (const char *const[]){"traceparent", TP, "accept", "*/*", NULL});
    h = only(&ex.req.headers, "traceparent", &n);
    CHECK(n == 1 && h && memcmp(h->value.p, TP, 36) == 0 && memcmp(h->value.p + 52, "-01", 3) == 0);
    CHECK(ex.trace_id && memcmp(ex.trace_id, TP + 3, 32) == 0);
    CHECK(only(&ex.req.headers, "accept", &n) && n == 1);

    /* absent: a new trace, not sampled */
    run(&ch, &a, &ex, (const char *const[]){NULL});
    h = only(&ex.req.headers, "traceparent", &n);
    CHECK(n == 1 && h && fy_traceparent_parse(h->value.p, h->value.len, &tp) == 0);
    CHECK(memcmp(h->value.p + 52, "-00", 3) == 0);
    char first[33];
    memcpy(first, ex.trace_id, 32);
    first[32] = '\0';
    run(&ch, &a, &ex, (const char *const[]){NULL});
    CHECK(memcmp(first, ex.trace_id, 32) != 0); /* each its own */

    /* malformed, and two of them: replaced; its tracestate dropped */
    static const char *const bad[] = {"00-zz", TP};
    for (int k = 0; k < 2; k++) {
        if (k == 0)
            run(&ch, &a, &ex,
                (const char *const[]){"traceparent", bad[0], "tracestate", "a=1", NULL});
        else
            run(&ch, &a, &ex,
                (const char *const[]){"traceparent", TP, "traceparent", TP, "tracestate", "a=1",
                                      NULL});
        h = only(&ex.req.headers, "traceparent", &n);
        CHECK(n == 1 && h && fy_traceparent_parse(h->value.p, h->value.len, &tp) == 0);
        CHECK(memcmp(h->value.p + 3, TP + 3, 32) != 0);
        CHECK(only(&ex.req.headers, "tracestate", &n) == NULL && n == 0);
    }

    /* tracestate-max: cut at a member; nothing whole fits: none */
    conf.tracestate_max = 5;
    run(&ch, &a, &ex, (const char *const[]){"traceparent", TP, "tracestate", "a=1,bb=22", NULL});
    h = only(&ex.req.headers, "tracestate", &n);
    CHECK(n == 1 && h && h->value.len == 3);
    conf.tracestate_max = 2;
    run(&ch, &a, &ex, (const char *const[]){"traceparent", TP, "tracestate", "a=1", NULL});
    CHECK(only(&ex.req.headers, "tracestate", &n) == NULL && n == 0);

    /* generate: false — nothing added; a malformed one removed; a valid one still goes on */
    conf.generate = false;
    conf.tracestate_max = 512;
    run(&ch, &a, &ex, (const char *const[]){NULL});
    CHECK(only(&ex.req.headers, "traceparent", &n) == NULL && n == 0 && !ex.trace_id);
    run(&ch, &a, &ex, (const char *const[]){"traceparent", "junk", NULL});
    CHECK(only(&ex.req.headers, "traceparent", &n) == NULL && n == 0 && !ex.trace_id);
    run(&ch, &a, &ex, (const char *const[]){"traceparent", TP, NULL});
    CHECK(only(&ex.req.headers, "traceparent", &n) && n == 1 && ex.trace_id);

    /* sampled: the traces we start carry -01 (read when the filter is made: a new one) */
    conf.generate = true;
    conf.sampled = true;
    fy_filter_chain_free(&ch);
    ch = chain_for(&conf);
    run(&ch, &a, &ex, (const char *const[]){NULL});
    h = only(&ex.req.headers, "traceparent", &n);
    CHECK(h && memcmp(h->value.p + 52, "-01", 3) == 0);

    fy_filter_chain_free(&ch);
    fy_arena_free(&a);
}

FY_TEST_MAIN(test_parse(); test_tracestate(); test_filter())
