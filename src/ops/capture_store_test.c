/* Capture store: write, read back, redaction, the size bound, rebuild, and the drop paths. */
#include "ops/capture_store.c"

#include <sys/stat.h>

#include "core/test.h"

static char tmpl[] = "/tmp/fy_cs_test.XXXXXX";

static fy_cs_flow_t flow(const char *path, const char *body, size_t blen)
{
    static fy_cs_header_t rq[] = {
        {FY_STR_LIT("Host"), FY_STR_LIT("example.test")},
        {FY_STR_LIT("Authorization"), FY_STR_LIT("Bearer secret-token")},
        {FY_STR_LIT("X-Api-Key"), FY_STR_LIT("k-123")},
        {FY_STR_LIT("Accept"), FY_STR_LIT("*/*")},
    };
    static fy_cs_header_t rs[] = {
        {FY_STR_LIT("content-type"), FY_STR_LIT("application/json")},
        {FY_STR_LIT("set-cookie"), FY_STR_LIT("sid=abc")},
    };
    fy_cs_flow_t f = {0};
    f.start_us = 1700000000000000;
    f.duration_ms = 12;
    f.status = 200;
    f.version = 11;
    f.method = FY_STR_LIT("POST");
    f.scheme = FY_STR_LIT("https");
    f.authority = FY_STR_LIT("example.test");
    f.target = fy_str(path, strlen(path));
    f.req_headers = rq;
    f.n_req_headers = 4;
    f.res_headers = rs;
    f.n_res_headers = 2;
    f.req_body = fy_str(body, blen);
    f.req_size = blen;
    f.res_body = FY_STR_LIT("{\"ok\": true, \"token\": \"t0p\"}");
    f.res_size = f.res_body.len;
    return f;
}

static fy_cs_conf_t conf(const char *dir)
{
    static const char *const hs[] = {"X-Api-Key", NULL};
    static const char *const js[] = {"password", "token", NULL};
    return (fy_cs_conf_t){.dir = dir,
                          .max_size = 1 << 20,
                          .segment_size = 64 << 10,
                          .body_cap = 1000,
                          .redact = true,
                          .redact_headers = hs,
                          .redact_json = js,
                          .max_queue = 100000,
                          .max_queue_bytes = 64 << 20};
}

static bool ieq(fy_str_t a, const char *lower)
{
    return a.len == strlen(lower) && fy_str_ieq(a, lower, a.len);
}

static fy_str_t hdr(const fy_cs_flow_t *f, bool res, const char *lower)
{
    const fy_cs_header_t *h = res ? f->res_headers : f->req_headers;
    size_t n = res ? f->n_res_headers : f->n_req_headers;
    for (size_t i = 0; i < n; i++)
        if (ieq(h[i].name, lower)) return h[i].value;
    return FY_STR_NULL;
}

static bool count_cb(const fy_cs_entry_t *e, void *ud)
{
    (void)e;
    (*(size_t *)ud)++;
    return true;
}

static uint64_t dir_bytes(const char *dir)
{
    uint64_t n = 0;
    DIR *d = opendir(dir);
    struct dirent *de;
    while (d && (de = readdir(d))) {
        char p[4096];
        struct stat sb;
        snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
        if (stat(p, &sb) == 0 && S_ISREG(sb.st_mode)) n += (uint64_t)sb.st_size;
    }
    if (d) closedir(d);
    return n;
}

static void test_roundtrip_and_redaction(const char *dir)
{
    fy_cs_conf_t c = conf(dir);
    fy_cs_t *cs = fy_cs_open(&c);
    CHECK(cs != NULL);
    const char body[] = "{\"user\": \"ann\", \"password\": \"hunter2\", \"n\": {\"token\": [1,2]}}";
    fy_cs_flow_t f = flow("/login?x=1", body, sizeof body - 1);
    CHECK_EQ_INT(fy_cs_submit(cs, &f), 0);
    char big[3000];
    memset(big, 'b', sizeof big);
    fy_cs_flow_t g = flow("/big", big, sizeof big);
    static const fy_cs_header_t meta[] = {{FY_STR_LIT(FY_CS_META_CONNECT), FY_STR_LIT("250")},
                                          {FY_STR_LIT("tls.sni"), FY_STR_LIT("example.test")}};
    g.meta = meta;
    g.n_meta = 2;
    CHECK_EQ_INT(fy_cs_submit(cs, &g), 0);
    fy_cs_flush(cs);
    fy_cs_stats_t st;
    fy_cs_stats(cs, &st);
    CHECK_EQ_INT(st.stored, 2);
    CHECK_EQ_INT(st.flows, 2);
    CHECK_EQ_INT(st.last_id, 2);

    fy_cs_loaded_t l;
    CHECK_EQ_INT(fy_cs_load(cs, 1, &l), 0);
    CHECK_STRN(l.f.target.p, l.f.target.len, "/login?x=1");
    fy_str_t a = hdr(&l.f, false, "authorization");
    CHECK_STRN(a.p, a.len, "[redacted]");
    a = hdr(&l.f, false, "x-api-key");
    CHECK_STRN(a.p, a.len, "[redacted]");
    a = hdr(&l.f, false, "accept");
    CHECK_STRN(a.p, a.len, "*/*");
    a = hdr(&l.f, true, "set-cookie");
    CHECK_STRN(a.p, a.len, "[redacted]");
    CHECK_STRN(l.f.req_body.p, l.f.req_body.len,
               "{\"user\": \"ann\", \"password\": \"[redacted]\", \"n\": {\"token\": "
               "\"[redacted]\"}}");
    CHECK_STRN(l.f.res_body.p, l.f.res_body.len, "{\"ok\": true, \"token\": \"[redacted]\"}");
    CHECK(!(l.f.flags & FY_CS_REQ_TRUNCATED));
    fy_cs_loaded_free(&l);

    CHECK_EQ_INT(fy_cs_load(cs, 2, &l), 0);
    CHECK_EQ_INT(l.f.req_body.len, 1000); /* body-cap */
    CHECK_EQ_INT(l.f.req_size, 3000);
    CHECK(l.f.flags & FY_CS_REQ_TRUNCATED);
    CHECK_EQ_INT(l.f.n_meta, 2); /* meta ride after the bodies */
    CHECK_STRN(l.f.meta[1].name.p, l.f.meta[1].name.len, "tls.sni");
    CHECK_STRN(l.f.meta[1].value.p, l.f.meta[1].value.len, "example.test");
    fy_cs_loaded_free(&l);
    CHECK_EQ_INT(fy_cs_load(cs, 1, &l), 0);
    CHECK_EQ_INT(l.f.n_meta, 0); /* a record without them (as before meta existed) */
    fy_cs_loaded_free(&l);
    CHECK_EQ_INT(fy_cs_load(cs, 3, &l), -ENOENT);
    fy_cs_close(cs);

    /* reopened: the index comes back from the segments, ids go on */
    cs = fy_cs_open(&c);
    fy_cs_stats(cs, &st);
    CHECK_EQ_INT(st.flows, 2);
    CHECK_EQ_INT(st.last_id, 2);
    CHECK_EQ_INT(fy_cs_load(cs, 2, &l), 0);
    CHECK_STRN(l.f.target.p, l.f.target.len, "/big");
    CHECK_EQ_INT(l.f.n_meta, 2);
    CHECK_STRN(l.f.meta[0].value.p, l.f.meta[0].value.len, "250");
    fy_cs_loaded_free(&l);
    CHECK_EQ_INT(fy_cs_submit(cs, &f), 0);
    fy_cs_flush(cs);
    fy_cs_stats(cs, &st);
    CHECK_EQ_INT(st.last_id, 3);
    fy_cs_close(cs);
}

static void test_ring_bound(const char *dir)
{
    fy_cs_conf_t c = conf(dir);
    c.max_size = 256 << 10;
    fy_cs_t *cs = fy_cs_open(&c);
    char body[900];
    memset(body, 'x', sizeof body);
    fy_cs_flow_t f = flow("/r", body, sizeof body);
    for (int i = 0; i < 2000; i++) { /* about 2.6 MB written in all */
        fy_cs_submit(cs, &f);
        if (i % 100 == 0) fy_cs_flush(cs);
    }
    fy_cs_flush(cs);
    fy_cs_stats_t st;
    fy_cs_stats(cs, &st);
    CHECK(st.bytes <= c.max_size);
    CHECK(dir_bytes(dir) <= c.max_size);
    CHECK(st.deleted > 0);
    CHECK(st.flows + st.deleted == st.stored + 3); /* 3: the flows of the first test */
    size_t n = 0;
    fy_cs_walk(cs, true, 0, count_cb, &n);
    CHECK_EQ_INT(n, st.flows);
    fy_cs_loaded_t l;
    CHECK_EQ_INT(fy_cs_load(cs, st.last_id, &l), 0);
    fy_cs_loaded_free(&l);
    CHECK_EQ_INT(fy_cs_load(cs, 1, &l), -ENOENT); /* deleted by the ring */
    fy_cs_close(cs);
}

static void test_drops(const char *dir)
{
    /* a store directory under a regular file can never be created: every flow is dropped */
    char file[4096], sub[4200];
    snprintf(file, sizeof file, "%s/plain-file", dir);
    FILE *fp = fopen(file, "w");
    fclose(fp);
    snprintf(sub, sizeof sub, "%s/store", file);
    fy_cs_conf_t c = conf(sub);
    fy_cs_t *cs = fy_cs_open(&c);
    CHECK(cs != NULL);
    fy_cs_flow_t f = flow("/d", "a", 1);
    for (int i = 0; i < 5; i++) CHECK_EQ_INT(fy_cs_submit(cs, &f), 0);
    fy_cs_flush(cs);
    fy_cs_stats_t st;
    fy_cs_stats(cs, &st);
    CHECK_EQ_INT(st.dropped_write, 5);
    CHECK_EQ_INT(st.stored, 0);
    fy_cs_close(cs);

    /* a flow larger than the queue's byte bound is dropped at once, never waited for */
    c = conf(dir);
    c.max_queue_bytes = 100;
    cs = fy_cs_open(&c);
    CHECK_EQ_INT(fy_cs_submit(cs, &f), -1);
    fy_cs_stats(cs, &st);
    CHECK_EQ_INT(st.dropped_queue, 1);
    fy_cs_close(cs);
}

static void test_nested_dir(const char *dir)
{
    /* a store folder whose parents do not exist yet is made (mkdir -p) */
    char sub[4200];
    snprintf(sub, sizeof sub, "%s/n1/n2", dir);
    fy_cs_conf_t c = conf(sub);
    fy_cs_t *cs = fy_cs_open(&c);
    fy_cs_flow_t f = flow("/n", "a", 1);
    CHECK_EQ_INT(fy_cs_submit(cs, &f), 0);
    fy_cs_flush(cs);
    fy_cs_stats_t st;
    fy_cs_stats(cs, &st);
    CHECK_EQ_INT(st.stored, 1);
    fy_cs_close(cs);
    char p[4300];
    snprintf(p, sizeof p, "%s/seg-0000000000000001.fys", sub);
    CHECK(unlink(p) == 0);
    CHECK(rmdir(sub) == 0);
    snprintf(p, sizeof p, "%s/n1", dir);
    CHECK(rmdir(p) == 0);
}

static void test_json_redaction_edges(void)
{
    static const char *const names[] = {"a", NULL};
    size_t n;
    CHECK(fy_cs_redact_json("not json \"a\": 1", 15, names, &n) == NULL);
    CHECK(fy_cs_redact_json("{\"b\": 1}", 8, names, &n) == NULL);
    char *r = fy_cs_redact_json("[{\"a\":1},{\"a\":\"x\\\"y\"}]", 22, names, &n);
    CHECK(r != NULL);
    if (r) CHECK_STRN(r, n, "[{\"a\":\"[redacted]\"},{\"a\":\"[redacted]\"}]");
    free(r);
    r = fy_cs_redact_json("{\"a\": {\"x\": \"}\"", 16, names, &n); /* cut short */
    CHECK(r != NULL);
    if (r) CHECK_STRN(r, n, "{\"a\": \"[redacted]\"");
    free(r);
}

static void rm_rf(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *de;
    while (d && (de = readdir(d))) {
        if (de->d_name[0] == '.') continue;
        char p[4096];
        snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
        unlink(p);
    }
    if (d) closedir(d);
    rmdir(dir);
}

FY_TEST_MAIN({
    char *dir = mkdtemp(tmpl);
    CHECK(dir != NULL);
    test_roundtrip_and_redaction(dir);
    test_ring_bound(dir);
    test_drops(dir);
    test_nested_dir(dir);
    test_json_redaction_edges();
    rm_rf(dir);
})
