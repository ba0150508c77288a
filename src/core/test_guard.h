/* A PROT_NONE guard page for parser tests (CONVENTIONS.md habit 9): input copied to end
 * exactly where readable memory ends, so any read past the end faults. Test-only.
 * Threads: test-only, single-threaded. */
#ifndef FY_CORE_TEST_GUARD_H
#define FY_CORE_TEST_GUARD_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static char *guard_page; /* the page just before a PROT_NONE page */
static size_t page_size;

static void guard_init(void)
{
    page_size = (size_t)sysconf(_SC_PAGESIZE);
    char *m = mmap(NULL, 2 * page_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED || mprotect(m + page_size, page_size, PROT_NONE) != 0) {
        perror("mmap");
        exit(2);
    }
    guard_page = m;
}

/* Copies s[0..n) so that it ends at the guard page; returns the copy. */
static const char *at_guard(const char *s, size_t n)
{
    if (n > page_size) {
        fprintf(stderr, "input too large for the guard page\n");
        exit(2);
    }
    char *d = guard_page + page_size - n;
    memmove(d, s, n);
    return d;
}

#endif
