/* Tests for cache_disk.c: an object written by the writer thread and loaded back after the
 * zone and its disk were closed and reopened (the start-up scan), variants, a corrupted file
 * (removed, never loaded) and a truncated one (removed by the scan), files of other names
 * left alone, the size bound, removal by key / prefix / tag, a directory that cannot be
 * written (errors counted, the caller never waits), and the bounded write queue. */
#include "policy/cache_disk.c"

#include "core/test.h"

static fy_arena_t A;
static char dir[64];

static fy_header_t H1[] = {{FY_STR_LIT("etag"), FY_STR_LIT("\"x\"")},
                           {FY_STR_LIT("surrogate-key"), FY_STR_LIT("t1 t2")}};
static fy_headers_t HS = {H1, 2, 2};

static uint64_t H(const char *k)
{
    return fy_cache_hash(k, strlen(k));
}

static fy_cache_obj_t *store(fy_cache_zone_t *z, const char *key, const char *body, const char *vn,
                             const char *vk)
{
    bool f;
    fy_cache_obj_t *o = fy_cache_begin(z, H(key), key, strlen(key), &f);
    CHECK(!f);
    o->fresh.lifetime = 60;
    o->date = o->response_time = o->request_time = 1000;
    CHECK_EQ_INT(fy_cache_set_head(z, o, 200, &HS, vn, vn ? strlen(vn) : 0, vk, vk ? strlen(vk) : 0,
                                   1 << 20),
                 0);
    CHECK_EQ_INT(fy_cache_append(z, o, body, strlen(body), 1 << 20), 0);
    fy_cache_finish(z, o); /* queues the write */
    return o;
}

static fy_cache_zone_t *open_zone(const char *name, uint64_t disk_max)
{
    fy_cache_zone_t *z = fy_cache_zone_get(name, 1 << 20);
    CHECK_EQ_INT(fy_cache_zone_set_disk(z, dir, disk_max, 16), 0);
    CHECK(fy_cache_zone_disk(z) != NULL);
    return z;
}

static fy_cache_disk_stats_t stats(fy_cache_zone_t *z)
{
    fy_cache_disk_stats_t s;
    fy_cache_disk_drain(fy_cache_zone_disk(z));
    fy_cache_disk_stats(fy_cache_zone_disk(z), &s);
    return s;
}

/* Load key into a new pending object the way the filter does; returns it (a reference). */
static fy_cache_obj_t *load_key(fy_cache_zone_t *z, const char *key, const fy_headers_t *rh)
{
    fy_cache_disk_t *d = fy_cache_zone_disk(z);
    uint64_t name = fy_cache_disk_find(d, H(key), key, strlen(key), rh, &A);
    if (!name) return NULL;
    bool f;
    fy_cache_obj_t *o = fy_cache_begin(z, H(key), key, strlen(key), &f);
    CHECK(!f);
    CHECK_EQ_INT(fy_cache_disk_load(d, o, name), 0);
    fy_cache_disk_drain(d);
    return o;
}

static size_t body_of(fy_cache_obj_t *o, char *out, size_t cap)
{
    const fy_cache_chunk_t *c = NULL;
    size_t co = 0, off = 0, k;
    const char *p;
    while ((k = fy_cache_obj_read(o, off, &c, &co, &p)) > 0 && off + k <= cap) {
        memcpy(out + off, p, k);
        off += k;
    }
    return off;
}

static int nfiles(void)
{
    DIR *dp = opendir(dir);
    int n = 0;
    struct dirent *de;
    while ((de = readdir(dp)))
        if (de->d_name[0] != '.') n++;
    closedir(dp);
    return n;
}

static void path_of(fy_cache_zone_t *z, const char *key, char *out, size_t cap)
{
    static fy_headers_t none;
    uint64_t name = fy_cache_disk_find(fy_cache_zone_disk(z), H(key), key, strlen(key), &none, &A);
    CHECK(name != 0);
    char fn[17];
    fname(fn, name);
    snprintf(out, cap, "%s/%s", dir, fn);
}

static void test_restart(void)
{
    static fy_headers_t none;
    fy_cache_zone_t *z = open_zone("d-restart", 1 << 20);
    fy_cache_obj_release(store(z, "http://a/1", "hello disk", NULL, NULL));
    fy_header_t gz0[] = {{FY_STR_LIT("accept-encoding"), FY_STR_LIT("gzip")}};
    fy_headers_t hgz0 = {gz0, 1, 1};
    size_t vkl;
    char vk[64];
    const char *vk0 = fy_cache_vary_key(&A, &hgz0, "accept-encoding", 15, &vkl);
    CHECK(vkl < sizeof vk);
    memcpy(vk, vk0, vkl);
    vk[vkl] = '\0';
    fy_cache_obj_release(store(z, "http://a/v", "gzip body", "accept-encoding", vk));
    fy_cache_disk_stats_t s = stats(z);
    CHECK_EQ_INT(s.writes, 2);
    CHECK_EQ_INT(s.entries, 2);
    fy_cache_zone_put(z); /* a restart: memory gone, files stay */
    CHECK_EQ_INT(nfiles(), 2);

    z = open_zone("d-restart", 1 << 20);
    CHECK_EQ_INT(stats(z).entries, 2);
    CHECK(fy_cache_zone_count(z) == 0);
    fy_cache_obj_t *o = load_key(z, "http://a/1", &none);
    CHECK(o != NULL);
    CHECK_EQ_INT(atomic_load(&o->state), FY_CACHE_COMPLETE);
    CHECK(o->from_disk);
    CHECK_EQ_INT(o->status, 200);
    CHECK_EQ_INT(o->fresh.lifetime, 60);
    CHECK_EQ_INT(o->date, 1000);
    CHECK_EQ_INT(o->nhdrs, 2);
    CHECK_STRN(o->etag.p, o->etag.len, "\"x\"");
    char b[64];
    size_t n = body_of(o, b, sizeof b);
    CHECK_STRN(b, n, "hello disk");
    fy_cache_obj_release(o);
    /* now in memory: a lookup finds it there */
    bool pend;
    o = fy_cache_lookup(z, H("http://a/1"), "http://a/1", 10, &none, &A, &pend);
    CHECK(o && !pend);
    fy_cache_obj_release(o);
    /* variants: only the stored one's secondary key finds the file */
    fy_header_t br[] = {{FY_STR_LIT("accept-encoding"), FY_STR_LIT("br")}};
    fy_header_t gz[] = {{FY_STR_LIT("accept-encoding"), FY_STR_LIT("gzip")}};
    fy_headers_t hbr = {br, 1, 1}, hgz = {gz, 1, 1};
    CHECK(load_key(z, "http://a/v", &hbr) == NULL);
    o = load_key(z, "http://a/v", &hgz);
    CHECK(o && atomic_load(&o->state) == FY_CACHE_COMPLETE);
    CHECK(o->vklen == vkl && !memcmp(o->vary_key, vk, vkl));
    fy_cache_obj_release(o);
    /* loaded objects are not written back */
    CHECK_EQ_INT(stats(z).writes, 0);
    /* purge by key reaches the disk */
    CHECK(fy_cache_invalidate(z, H("http://a/1"), "http://a/1", 10) >= 1);
    CHECK_EQ_INT(stats(z).entries, 1);
    CHECK(fy_cache_purge_prefix(z, "http://a/", 9) >= 1);
    CHECK_EQ_INT(stats(z).entries, 0);
    CHECK_EQ_INT(nfiles(), 0);
    fy_cache_zone_put(z);
}

static void test_corrupt(void)
{
    static fy_headers_t none;
    fy_cache_zone_t *z = open_zone("d-corrupt", 1 << 20);
    fy_cache_obj_release(store(z, "http://c/flip", "0123456789", NULL, NULL));
    fy_cache_obj_release(store(z, "http://c/cut", "abcdefghij", NULL, NULL));
    fy_cache_obj_release(store(z, "http://c/ok", "fine", NULL, NULL));
    CHECK_EQ_INT(stats(z).entries, 3);
    char flip[128], cut[128], other[128];
    path_of(z, "http://c/flip", flip, sizeof flip);
    path_of(z, "http://c/cut", cut, sizeof cut);
    fy_cache_zone_put(z);
    /* one body byte changed, one file cut short, one file that is not ours */
    int fd = open(flip, O_RDWR);
    struct stat sb;
    fstat(fd, &sb);
    CHECK(pwrite(fd, "X", 1, sb.st_size - 3) == 1);
    close(fd);
    CHECK_EQ_INT(truncate(cut, 40), 0);
    snprintf(other, sizeof other, "%s/README", dir);
    fd = open(other, O_WRONLY | O_CREAT, 0600);
    close(fd);

    z = open_zone("d-corrupt", 1 << 20);
    fy_cache_disk_stats_t s = stats(z);
    CHECK_EQ_INT(s.entries, 2); /* the scan dropped the cut one */
    CHECK_EQ_INT(s.corrupt, 1);
    CHECK(access(cut, F_OK) < 0);
    CHECK(access(other, F_OK) == 0); /* not ours: left alone */
    fy_cache_obj_t *o = load_key(z, "http://c/flip", &none);
    CHECK(o != NULL);
    CHECK_EQ_INT(atomic_load(&o->state), FY_CACHE_PASS); /* never served */
    fy_cache_obj_release(o);
    s = stats(z);
    CHECK_EQ_INT(s.corrupt, 2);
    CHECK_EQ_INT(s.entries, 1);
    CHECK(access(flip, F_OK) < 0);
    bool pend;
    CHECK(fy_cache_lookup(z, H("http://c/flip"), "http://c/flip", 13, &none, &A, &pend) == NULL);
    o = load_key(z, "http://c/ok", &none);
    CHECK(o && atomic_load(&o->state) == FY_CACHE_COMPLETE);
    fy_cache_obj_release(o);
    CHECK(fy_cache_purge_tag(z, "t2", 2) >= 1);
    CHECK_EQ_INT(stats(z).entries, 0);
    unlink(other);
    fy_cache_zone_put(z);
}

static void test_bound(void)
{
    char body[2001];
    memset(body, 'b', 2000);
    body[2000] = '\0';
    fy_cache_zone_t *z = open_zone("d-bound", 5000);
    char key[32];
    for (int i = 0; i < 6; i++) {
        snprintf(key, sizeof key, "http://b/%d", i);
        fy_cache_obj_release(store(z, key, body, NULL, NULL));
        fy_cache_disk_drain(fy_cache_zone_disk(z));
    }
    fy_cache_disk_stats_t s = stats(z);
    CHECK(s.bytes <= 5000);
    CHECK_EQ_INT(s.entries, 2);
    CHECK_EQ_INT(s.evictions, 4);
    CHECK_EQ_INT(nfiles(), 2);
    static fy_headers_t none;
    CHECK(fy_cache_disk_find(fy_cache_zone_disk(z), H("http://b/5"), "http://b/5", 10, &none, &A) !=
          0); /* the newest stay */
    CHECK(fy_cache_disk_find(fy_cache_zone_disk(z), H("http://b/0"), "http://b/0", 10, &none, &A) ==
          0);
    fy_cache_purge_prefix(z, "http://b/", 9);
    fy_cache_zone_put(z);
}

static void test_unwritable(void)
{
    char sub[96];
    snprintf(sub, sizeof sub, "%s/gone", dir);
    fy_cache_zone_t *z = fy_cache_zone_get("d-gone", 1 << 20);
    CHECK_EQ_INT(fy_cache_zone_set_disk(z, sub, 1 << 20, 4), 0);
    CHECK_EQ_INT(rmdir(sub), 0); /* every write now fails */
    for (int i = 0; i < 3; i++) {
        char key[32];
        snprintf(key, sizeof key, "http://g/%d", i);
        fy_cache_obj_release(store(z, key, "x", NULL, NULL));
        fy_cache_disk_drain(fy_cache_zone_disk(z));
    }
    fy_cache_disk_stats_t s = stats(z);
    CHECK_EQ_INT(s.write_errors, 3);
    CHECK_EQ_INT(s.entries, 0);
    CHECK(fy_cache_zone_count(z) == 3); /* memory goes on */
    /* the queue is bounded: with the writer held, the second job is refused */
    fy_cache_disk_t *d = fy_cache_zone_disk(z);
    pthread_mutex_lock(&d->mu);
    d->wq.cap = 1; /* (v has 4 slots; the queue is empty) */
    d->wq.head = 0;
    CHECK_EQ_INT(push(d, &d->wq, (job_t){J_UNLINK, NULL, 1}), 0);
    CHECK_EQ_INT(push(d, &d->wq, (job_t){J_UNLINK, NULL, 2}), -EAGAIN);
    pthread_mutex_unlock(&d->mu);
    fy_cache_zone_put(z);
    /* a directory that cannot be made: the zone stays memory-only */
    fy_cache_zone_t *z2 = fy_cache_zone_get("d-bad", 1 << 20);
    CHECK_EQ_INT(fy_cache_zone_set_disk(z2, "/proc/self/no/such", 1 << 20, 4), -1);
    CHECK(fy_cache_zone_disk(z2) == NULL);
    fy_cache_zone_put(z2);
}

static void setup(void)
{
    snprintf(dir, sizeof dir, "/tmp/fy-disk-test-XXXXXX");
    CHECK(mkdtemp(dir) != NULL);
    fy_arena_init(&A, NULL, 0, 0);
}

static void teardown(void)
{
    rmdir(dir);
    fy_arena_free(&A);
}

FY_TEST_MAIN(setup(); test_restart(); test_corrupt(); test_bound(); test_unwritable(); teardown())
