/* Unit tests of discovery: the file parser (both forms, every error with its line, each
 * prefix of a good file, a file ending at a guard page) and the slot table of upstream.c (a
 * removed server drains and is never picked, its slot is reused only after every worker that
 * used the upstream swept past the removal holding nothing of it, a server back while
 * draining gets its slot again, an empty set picks the placeholder). */
#include "upstream.c"
#include "upstream_health.c"
#include "upstream_slots.c"

#include <sys/mman.h>
#include <unistd.h>

#include "core/test.h"

static fy_disc_entry_t out[8];
static char err[1024];

static int parse(const char *text)
{
    err[0] = 0;
    return fy_discovery_parse("s.txt", text, strlen(text), out, 4, err, sizeof err);
}

static void test_parse(void)
{
    CHECK_EQ_INT(parse("# c\n\nhttp://10.0.0.1:80\n  https://10.0.0.2:443  weight=3 # x\n"), 2);
    CHECK(!strcmp(out[0].url, "http://10.0.0.1:80") && out[0].weight == 1);
    CHECK(!strcmp(out[1].url, "https://10.0.0.2:443") && out[1].weight == 3);
    CHECK_EQ_INT(parse("- http://10.0.0.1:80\n- {url: 'h2c://[::1]:81', weight: 7}\n"), 2);
    CHECK(!strcmp(out[1].url, "h2c://[::1]:81") && out[1].weight == 7);
    CHECK_EQ_INT(parse("# yaml too\n[http://10.0.0.1:80]\n"), 1);
    CHECK_EQ_INT(parse(""), 0);
    CHECK_EQ_INT(parse("http://10.0.0.1:80\r\n"), 1); /* CRLF */

    struct {
        const char *text, *want;
    } bad[] = {
        {"http://10.0.0.1:80\nhttp://a.example:80\n", "s.txt:2: 'http://a.example:80': "
                                                      "'a.example' is not an IP address"},
        {"http://10.0.0.1:80 weight=0\n", "s.txt:1: 'weight=0': expected weight=N (1 to 1000)"},
        {"http://10.0.0.1:80 w 3\n", "s.txt:1: expected URL [weight=N], got more"},
        {"http://10.0.0.1:80\nhttp://10.0.0.1:80\n", "s.txt:2: 'http://10.0.0.1:80' is listed "
                                                     "twice"},
        {"ftp://10.0.0.1\n", "s.txt:1: expected a URL like"},
        {"http://10.0.0.1:80/app\n", "has no path"},
        {"http://10.0.0.1:1\nhttp://10.0.0.1:2\nhttp://10.0.0.1:3\nhttp://10.0.0.1:4\n"
         "http://10.0.0.1:5\n",
         "s.txt:5: more than 4 servers (max-servers)"},
        {"- {url: http://10.0.0.1:80, port: 1}\n", "s.txt:1:29: unknown key 'port'"},
        {"- {weight: 2}\n", "s.txt:1:3: url: missing"},
        {"- [http://10.0.0.1:80]\n", "s.txt:1:3: expected a URL or {url, weight}"},
        {"- {url: http://10.0.0.1:80, weight: 1001}\n", "weight: expected 1 to 1000"},
        {"- http://10.0.0.1:80\n  bad: [\n", "s.txt:"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CHECK_EQ_INT(parse(bad[i].text), -1);
        if (!strstr(err, bad[i].want)) fprintf(stderr, "case %zu: %s\n", i, err);
        CHECK(strstr(err, bad[i].want) != NULL);
    }

    /* every prefix of a good file parses or fails cleanly; the file ends at a guard page */
    const char *good = "http://10.0.0.1:80 weight=2\n- https://10.0.0.2:443\n";
    long pg = sysconf(_SC_PAGESIZE);
    char *m =
        mmap(NULL, (size_t)pg * 2, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(m != MAP_FAILED);
    mprotect(m + pg, (size_t)pg, PROT_NONE);
    size_t gl = strlen(good);
    for (size_t k = 0; k <= gl; k++) {
        char *p = m + pg - k;
        memcpy(p, good, k);
        int r = fy_discovery_parse("s.txt", p, k, out, 4, err, sizeof err);
        CHECK(r >= -1 && r <= 2);
    }
    const char *yaml = "- http://10.0.0.1:80\n- {url: http://10.0.0.2:80, weight: 3}\n";
    for (size_t k = 0; k <= strlen(yaml); k++) {
        char *p = m + pg - k;
        memcpy(p, yaml, k);
        int r = fy_discovery_parse("s.txt", p, k, out, 4, err, sizeof err);
        CHECK(r >= -1 && r <= 2);
    }
    munmap(m, (size_t)pg * 2);
}

static void entry(fy_disc_entry_t *e, const char *url)
{
    memset(e, 0, sizeof *e);
    snprintf(e->url, sizeof e->url, "%s", url);
    e->weight = 1;
}

static int slot_of(fy_upstream_t *u, const char *url)
{
    for (size_t i = 0; i < u->dyn->cap; i++)
        if (u->dyn->state[i] != SLOT_FREE && !strcmp(u->dyn->slots[i].url, url)) return (int)i;
    return -1;
}

static void sweep_all(fy_upstream_t *u)
{
    for (int w = 0; w < u->nworkers; w++) dyn_sweep(&u->dyn->w[w].sweep);
}

static void test_slots(void)
{
    char path[] = "/tmp/ferry-disc-XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    const char *text = "http://127.0.0.1:1\nhttp://127.0.0.1:2\n";
    CHECK(write(fd, text, strlen(text)) == (ssize_t)strlen(text));
    close(fd);
    fy_discovery_conf_t dc = {.file = path, .max_servers = 2};
    fy_upstream_conf_t uc = {.name = "t", .discovery = &dc, .keepalive = 8, .max_fails = 3};
    fy_upstream_t *u = fy_upstream_new(&uc, 2);
    CHECK(u && fy__upstream_live_servers(u) == 2);
    CHECK_EQ_INT(fy_upstream_nservers(u), 3); /* two slots and the placeholder */
    fy_loop_t loop;
    CHECK(fy_loop_init(&loop) == 0);
    for (int w = 0; w < 2; w++) fy__upstream_dyn_touch(u, w, &loop);
    /* both workers pick: both are users now */
    for (int w = 0; w < 2; w++) CHECK(fy_upstream_pick(u, w, 0, 0) < 2);
    int a = slot_of(u, "http://127.0.0.1:1"), b = slot_of(u, "http://127.0.0.1:2");
    CHECK(a >= 0 && b >= 0 && a != b);
    char bid[17];
    memcpy(bid, fy_upstream_server_id(u, b), 17);

    fy_disc_entry_t e[3];
    entry(&e[0], "http://127.0.0.1:1");
    fy__upstream_set_servers(u, e, 1); /* B drains */
    CHECK(fy__upstream_live_servers(u) == 1 && u->dyn->state[b] == SLOT_DRAINING);
    for (int i = 0; i < 50; i++) CHECK_EQ_INT(fy_upstream_pick(u, i & 1, 0, 0), a);
    CHECK(!fy_upstream_usable(u, 0, b, 0));
    CHECK_EQ_INT(fy_upstream_find_id(u, bid, 16), -1); /* sticky cookies go elsewhere */

    /* C comes: B's slot is not free until both workers swept past the removal */
    entry(&e[1], "http://127.0.0.1:3");
    fy__upstream_set_servers(u, e, 2);
    CHECK(slot_of(u, "http://127.0.0.1:3") < 0 && fy__upstream_live_servers(u) == 1);
    dyn_sweep(&u->dyn->w[0].sweep);
    fy__upstream_set_servers(u, e, 2);
    CHECK(slot_of(u, "http://127.0.0.1:3") < 0); /* worker 1 has not swept */
    /* worker 1 holds a connection to B: swept, but not clear */
    u->workers[1].srv[b].nconns = 1;
    sweep_all(u);
    fy__upstream_set_servers(u, e, 2);
    CHECK(slot_of(u, "http://127.0.0.1:3") < 0);
    /* B comes back while draining: its own slot, its id again */
    entry(&e[1], "http://127.0.0.1:2");
    fy__upstream_set_servers(u, e, 2);
    CHECK_EQ_INT(slot_of(u, "http://127.0.0.1:2"), b);
    CHECK(u->dyn->state[b] == SLOT_LIVE && fy_upstream_find_id(u, bid, 16) == b);
    /* gone again, the connection closed, every worker swept: C reuses the slot */
    fy__upstream_set_servers(u, e, 1);
    u->workers[1].srv[b].nconns = 0;
    sweep_all(u);
    entry(&e[1], "http://127.0.0.1:3");
    fy__upstream_set_servers(u, e, 2);
    CHECK_EQ_INT(slot_of(u, "http://127.0.0.1:3"), b);
    CHECK(fy__upstream_live_servers(u) == 2);
    CHECK(strcmp(fy_upstream_server_id(u, b), bid) != 0);
    /* a new weight is a new server (a slot's conf never changes while it is listed) */
    e[1].weight = 5;
    fy__upstream_set_servers(u, e, 2);
    CHECK(fy__upstream_live_servers(u) == 1); /* no room yet for the reweighted one */
    /* an empty set: the placeholder, whose connect fails naming why */
    fy__upstream_set_servers(u, e, 0);
    CHECK_EQ_INT(fy_upstream_pick(u, 0, 0, 0), 2);
    const char *why = NULL;
    CHECK(fy_origin_connect(u, 0, 2, &loop, NULL, NULL, &why) == NULL);
    CHECK(why && !strcmp(why, "no servers discovered"));
    for (int w = 0; w < 2; w++) fy_upstream_worker_close(u, w);
    fy_upstream_free(u);
    fy_loop_destroy(&loop);
    unlink(path);
}

FY_TEST_MAIN(test_parse(); test_slots())
