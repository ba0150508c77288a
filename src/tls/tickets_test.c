/* Unit tests of tls/tickets.c: record sizes, the 80-vs-48 choice, bounds, and the callback
 * attaching to a context. Resumption across instances is tests/test_ticket_keys.py. */
#include "tls/tickets.h"

#include <openssl/ssl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "core/test.h"

static void test_sizes(void)
{
    unsigned char buf[80 * 17];
    for (size_t i = 0; i < sizeof buf; i++) buf[i] = (unsigned char)i;
    char msg[200];
    fy_tls_tickets_t *k = fy_tls_tickets_parse(buf, 80, msg, sizeof msg);
    CHECK(k && fy_tls_tickets_count(k) == 1);
    fy_tls_tickets_free(k);
    k = fy_tls_tickets_parse(buf, 48, msg, sizeof msg);
    CHECK(k && fy_tls_tickets_count(k) == 1);
    fy_tls_tickets_free(k);
    k = fy_tls_tickets_parse(buf, 96, msg, sizeof msg); /* two 48-byte keys */
    CHECK(k && fy_tls_tickets_count(k) == 2);
    fy_tls_tickets_free(k);
    k = fy_tls_tickets_parse(buf, 240, msg, sizeof msg); /* both divide: 80-byte records */
    CHECK(k && fy_tls_tickets_count(k) == 3);
    fy_tls_tickets_free(k);
    CHECK(!fy_tls_tickets_parse(buf, 50, msg, sizeof msg));
    CHECK(strstr(msg, "48 or 80") != NULL);
    CHECK(!fy_tls_tickets_parse(buf, 0, msg, sizeof msg));
    CHECK(strstr(msg, "empty") != NULL);
    CHECK(!fy_tls_tickets_parse(buf, 80 * 17, msg, sizeof msg));
    CHECK(strstr(msg, "at most 16") != NULL);
}

/* the first record's bytes as read, whichever the record size (the HTTP/3 key's secret) */
static void test_first(void)
{
    unsigned char buf[160], out[80];
    for (size_t i = 0; i < sizeof buf; i++) buf[i] = (unsigned char)(i * 7 + 1);
    char msg[200];
    fy_tls_tickets_t *k = fy_tls_tickets_parse(buf, 160, msg, sizeof msg);
    CHECK(k && fy_tls_tickets_first(k, out) == 80 && memcmp(out, buf, 80) == 0);
    fy_tls_tickets_free(k);
    k = fy_tls_tickets_parse(buf, 96, msg, sizeof msg);
    CHECK(k && fy_tls_tickets_first(k, out) == 48 && memcmp(out, buf, 48) == 0);
    fy_tls_tickets_free(k);
    CHECK(fy_tls_tickets_first(NULL, out) == 0);
}

static void test_load_and_attach(void)
{
    char path[] = "/tmp/ferry-tickets-XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    unsigned char key[80] = {1, 2, 3};
    CHECK(write(fd, key, sizeof key) == (ssize_t)sizeof key);
    close(fd);
    char msg[600];
    fy_tls_tickets_t *k = fy_tls_tickets_load(path, msg, sizeof msg);
    CHECK(k != NULL);
    SSL_CTX *c = SSL_CTX_new(TLS_server_method());
    CHECK(fy_tls_tickets_attach(c, k) == 0);
    SSL_CTX_free(c);
    fy_tls_tickets_free(k);
    unlink(path);
    CHECK(!fy_tls_tickets_load(path, msg, sizeof msg));
    CHECK(strstr(msg, path) != NULL);
}

FY_TEST_MAIN(test_sizes(); test_first(); test_load_and_attach())
