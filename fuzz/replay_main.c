/* Replays every file of a corpus directory through a libFuzzer entry point, so corpora run as
 * ordinary ctest tests in the gcc and sanitizer builds (the coverage-guided build is
 * `make fuzz`). Prints "N passed, 0 failed"; a crash fails the test. */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s CORPUS_DIR\n", argv[0]);
        return 2;
    }
    DIR *d = opendir(argv[1]);
    if (!d) {
        perror(argv[1]);
        return 1;
    }
    struct dirent *e;
    int n = 0;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", argv[1], e->d_name);
        FILE *f = fopen(path, "rb");
        if (!f) continue;
        struct stat st;
        fstat(fileno(f), &st);
        uint8_t *buf = malloc((size_t)st.st_size + 1);
        size_t len = fread(buf, 1, (size_t)st.st_size, f);
        fclose(f);
        LLVMFuzzerTestOneInput(buf, len);
        free(buf);
        n++;
    }
    closedir(d);
    if (n == 0) {
        fprintf(stderr, "empty corpus %s\n", argv[1]);
        return 1;
    }
    printf("%d passed, 0 failed\n", n);
    return 0;
}
