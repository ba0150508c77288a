/* Unit tests of the transform filter's templates (compile and expand against a hand-made
 * exchange), the request-id rules and the wire checks. */
#include "policy/transform.c"

#include <arpa/inet.h>
#include <netinet/in.h>

#include "core/arena.h"
#include "core/test.h"

static void test_compile(void)
{
    CHECK(fy_transform_template_why("/plain") == NULL);
    CHECK(fy_transform_template_why("https://{host}{request_uri}") == NULL);
    CHECK(fy_transform_template_why("$1-$9-{header.x-user}") == NULL);
    CHECK(fy_transform_template_why("{nope}") != NULL);
    CHECK(fy_transform_template_why("{host") != NULL);
    CHECK(fy_transform_template_why("{header.X-User}") != NULL);
    char many[200];
    size_t o = 0;
    for (int i = 0; i < 40; i++) o += (size_t)snprintf(many + o, sizeof many - o, "a$1");
    CHECK(fy_transform_template_why(many) != NULL);
    tpl_t t;
    CHECK(compile("a$1{path}$x", &t) == NULL);
    CHECK_EQ_INT(t.n, 4);
    CHECK(t.s[0].kind == S_LIT && t.s[1].kind == S_CAP && t.s[1].len == 1 &&
          t.s[2].kind == S_PATH && t.s[3].kind == S_LIT);
}

static void test_expand(void)
{
    fy_arena_t a;
    fy_arena_init(&a, NULL, 0, 0);
    fy_exchange_t ex;
    memset(&ex, 0, sizeof ex);
    ex.arena = &a;
    ex.req.authority = FY_STR_LIT("example.com:8080");
    ex.req.path = FY_STR_LIT("/x/y");
    ex.req.query = FY_STR_LIT("k=v");
    ex.req.method = FY_STR_LIT("GET");
    ex.req.scheme = FY_STR_LIT("https");
    fy_header_t hv[1] = {{FY_STR_LIT("X-User"), FY_STR_LIT("dave")}};
    ex.req.headers.v = hv;
    ex.req.headers.n = 1;
    struct sockaddr_in sin = {.sin_family = AF_INET};
    inet_pton(AF_INET, "10.1.2.3", &sin.sin_addr);
    ex.remote = (struct sockaddr *)&sin;
    vctx_t v = {.ex = &ex, .reqid = FY_STR_LIT("rid")};
    tpl_t t;
    compile("https://{host}{request_uri} {authority} {client} {method} {scheme} {request_id} "
            "{header.x-user}[{header.none}]",
            &t);
    fy_str_t r = expand(&v, &t);
    CHECK_STRN(r.p, r.len,
               "https://example.com/x/y?k=v example.com:8080 10.1.2.3 GET https rid dave[]");
    inet_pton(AF_INET, "192.168.0.255", &sin.sin_addr);
    v.client = FY_STR_NULL;
    compile("{client}", &t);
    r = expand(&v, &t);
    CHECK_STRN(r.p, r.len, "192.168.0.255");
    /* one part: that part itself, never a NULL pointer */
    compile("{path}", &t);
    r = expand(&v, &t);
    CHECK(r.p == ex.req.path.p && r.len == ex.req.path.len);
    compile("{header.none}", &t);
    r = expand(&v, &t);
    CHECK(r.p != NULL && r.len == 0);
    compile("$5", &t);
    r = expand(&v, &t);
    CHECK(r.p != NULL && r.len == 0);
    /* every byte value in every place, against snprintf */
    for (unsigned x = 0; x < 256; x++) {
        unsigned char *o = (unsigned char *)&sin.sin_addr;
        o[0] = (unsigned char)x, o[1] = (unsigned char)(255 - x), o[2] = (unsigned char)(x / 3),
        o[3] = (unsigned char)(x * 7);
        char want[20];
        snprintf(want, sizeof want, "%u.%u.%u.%u", o[0], o[1], o[2], o[3]);
        v.client = FY_STR_NULL;
        compile("<{client}>", &t);
        r = expand(&v, &t);
        char w2[24];
        snprintf(w2, sizeof w2, "<%s>", want);
        CHECK_STRN(r.p, r.len, w2);
    }
    ex.req.authority = FY_STR_LIT("[::1]:443");
    compile("{host}", &t);
    r = expand(&v, &t);
    CHECK_STRN(r.p, r.len, "[::1]");
    /* captures */
    PCRE2_SIZE ov[6] = {0, 4, 1, 2, PCRE2_UNSET, PCRE2_UNSET};
    v.subject = "/x/y";
    v.ov = ov;
    v.nmatch = 3;
    compile("<$0|$1|$2|$3>", &t);
    r = expand(&v, &t);
    CHECK_STRN(r.p, r.len, "</x/y|x||>");
    fy_arena_free(&a);
}

static void test_reqid(void)
{
    CHECK(reqid_ok(FY_STR_LIT("abc-123")));
    CHECK(!reqid_ok(FY_STR_LIT("")));
    CHECK(!reqid_ok(FY_STR_LIT("a b")));
    CHECK(!reqid_ok(FY_STR_LIT("a\x7f")));
    char big[200];
    memset(big, 'x', sizeof big);
    CHECK(!reqid_ok(fy_str(big, 129)) && reqid_ok(fy_str(big, 128)));
    fy_arena_t a;
    fy_arena_init(&a, NULL, 0, 0);
    fy_str_t x = new_reqid(&a), y = new_reqid(&a);
    CHECK(x.len == 32 && y.len == 32 && memcmp(x.p, y.p, 32) != 0);
    for (size_t i = 0; i < 32; i++) CHECK(strchr("0123456789abcdef", x.p[i]) != NULL);
    fy_arena_free(&a);
    CHECK(wire_ok(FY_STR_LIT("a\tb")) && !wire_ok(FY_STR_LIT("a\r\nb")) &&
          !wire_ok(FY_STR_LIT(" a")));
}

/* h1 spelling of configured names, and set/append with it (h1) or the lowercase name (h2) */
static void test_names(void)
{
    static const char *const cases[][2] = {
        {"etag", "ETag"},
        {"www-authenticate", "WWW-Authenticate"},
        {"x-xss-protection", "X-XSS-Protection"},
        {"x-frame-options", "X-Frame-Options"},
        {"X-Custom-ID", "X-Custom-ID"},
        {"ETag", "ETag"},
        {"x", "X"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        fy_str_t s = h1_spelling(cases[i][0]);
        CHECK_STRN(s.p, s.len, cases[i][1]);
        CHECK(s.p[s.len] == '\0');
        free((char *)s.p);
    }
    fy_arena_t a;
    fy_arena_init(&a, NULL, 0, 0);
    fy_header_t hv[4] = {{FY_STR_LIT("X-Frame-Options"), FY_STR_LIT("SAMEORIGIN")},
                         {FY_STR_LIT("content-type"), FY_STR_LIT("text/plain")},
                         {FY_STR_LIT("x-frame-options"), FY_STR_LIT("ALLOW")}};
    fy_headers_t hs = {hv, 3, 4};
    fy_hname_t n;
    fy_hname_init(&n, "x-frame-options");
    set_hdr(&a, &hs, &n, FY_STR_LIT("X-Frame-Options"), FY_STR_LIT("DENY"));
    CHECK_EQ_INT(hs.n, 2); /* replaced in place, the second one gone */
    CHECK_STRN(hv[0].name.p, hv[0].name.len, "X-Frame-Options");
    CHECK_STRN(hv[0].value.p, hv[0].value.len, "DENY");
    CHECK_STRN(hv[1].name.p, hv[1].name.len, "content-type");
    fy_hname_init(&n, "etag");
    set_hdr(&a, &hs, &n, FY_STR_LIT("etag"), FY_STR_LIT("\"v\""));
    CHECK_EQ_INT(hs.n, 3); /* none: appended in the spare entry */
    CHECK(hs.v == hv && hv[2].name.len == 4 && memcmp(hv[2].name.p, "etag", 4) == 0);
    set_hdr(&a, &hs, &n, FY_STR_LIT("ETag"), FY_STR_LIT("\"w\""));
    CHECK_EQ_INT(hs.n, 3);
    CHECK_STRN(hv[2].value.p, hv[2].value.len, "\"w\"");
    fy_hname_init(&n, "vary");
    set_hdr(&a, &hs, &n, FY_STR_LIT("Vary"), FY_STR_LIT("accept"));
    set_hdr(&a, &hs, &n, FY_STR_LIT("Vary"), FY_STR_LIT("origin"));
    CHECK_EQ_INT(hs.n, 4); /* the last spare entry, then found there */
    CHECK_STRN(hs.v[3].value.p, hs.v[3].value.len, "origin");
    fy_hname_init(&n, "link");
    set_hdr(&a, &hs, &n, FY_STR_LIT("Link"), FY_STR_LIT("</a>"));
    CHECK(hs.n == 5 && hs.v != hv); /* full: grown through fy_headers_add */
    CHECK_STRN(hs.v[4].name.p, hs.v[4].name.len, "Link");
    CHECK_STRN(hs.v[0].value.p, hs.v[0].value.len, "DENY");
    fy_arena_free(&a);
}

/* The on_request that a transform gets from what it has to do */
static void test_ops(void)
{
    char err[128];
    fy_transform_conf_t c;
    memset(&c, 0, sizeof c);
    fy_filter_t *f = fy_transform_filter_new(&c, err, sizeof err);
    CHECK(f && f->ops == &transform_none_ops);
    destroy(f);
    char k[] = "X-Frame-Options", v[] = "DENY";
    char *keys[] = {k}, *vals[] = {v};
    c.response_headers.set.keys = keys;
    c.response_headers.set.values = vals;
    c.response_headers.set.n = 1;
    f = fy_transform_filter_new(&c, err, sizeof err);
    CHECK(f && f->ops == &transform_res_ops);
    transform_filter_t *t = (transform_filter_t *)f;
    CHECK(t->res_lit_only && strcmp(k, "x-frame-options") == 0);
    CHECK_STRN(t->res.v[0].h1name.p, t->res.v[0].h1name.len, "X-Frame-Options");
    destroy(f);
    char rid[] = "x-request-id";
    c.request_id = rid;
    c.request_id_response = true;
    f = fy_transform_filter_new(&c, err, sizeof err);
    t = (transform_filter_t *)f;
    CHECK(f && f->ops == &transform_ops && !t->res_lit_only);
    CHECK_STRN(t->reqid_h1.p, t->reqid_h1.len, "X-Request-Id");
    destroy(f);
}

FY_TEST_MAIN(test_compile(); test_expand(); test_reqid(); test_names(); test_ops())
