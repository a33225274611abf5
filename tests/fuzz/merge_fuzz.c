/* tests/fuzz/merge_fuzz.c - fuzz target: a cluster's `troupe list|get|summary` merging
 * (api/cmd/merge.h) fed another node's HTTP answer, as JSON list, table and summary,
 * beside a well-formed one. Build with libFuzzer via tools/fuzz.sh; the regression driver
 * (fuzz_driver.cc) runs it in every test run. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "api/cmd/merge.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *a = malloc(size + 1); /* (an answer arrives NUL-terminated: the CLI adds one) */
    if (!a) return 0;
    memcpy(a, data, size);
    a[size] = '\0';
    const char *answers[] = {
        "{\"kind\":\"actors\",\"items\":[{\"id\":\"x\"}],\"total\":1,\"matched\":1}", a};
    const char *tables[] = {"ID\nx\n(1 shown of 1 matched, 1 in all)\n", a};
    const char *sums[] = {"{\"kind\":\"actors\",\"total\":1,\"by_state\":{\"ALIVE\":1}}", a};
    tr__buf out = TR__BUF_INIT;
    tr__merge_list("actors", answers, 2, 0, (long)(size % 3), 2, &out);
    tr__buf_free(&out);
    tr__merge_list("actors", tables, 2, 1, 0, 100, &out);
    tr__buf_free(&out);
    tr__merge_summary("actors", sums, 2, &out);
    tr__buf_free(&out);
    free(a);
    return 0;
}
