/* tests/fuzz/fuzz_driver.cc - runs a libFuzzer target without libFuzzer: every test run
 * feeds it seeds (valid messages of every kind) and 30,000 deterministic mutations of
 * them plus random bytes, under whatever sanitizer the build uses. Real coverage-guided
 * fuzzing: tools/fuzz.sh. */
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

extern "C" {
#include "actor/protocol.h"
#include "core/trace.h"
#include "core/codec.h"
#include "core/config.h"
#include "core/frame.h"
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
}

namespace {

std::string take(tr__buf *b) {
    std::string s(b->data ? b->data : "", b->len);
    tr__buf_free(b);
    return s;
}

std::vector<std::string> seeds() {
    std::vector<std::string> out;
    tr__buf b = TR__BUF_INIT;
    tr__call_frame(&b, 7, "echo", "12345678", 8, nullptr, 0);
    out.push_back(take(&b));
    tr__wire_arg wa[3] = {};
    memcpy(wa[0].ref, "0123456789abcde\x80", 16); /* an object */
    wa[1].data = "an inline value";               /* another call's small result */
    wa[1].len = 15;
    wa[2].data = "";
    tr__call_frame(&b, 8, "sum", "", 0, wa, 3);
    out.push_back(take(&b));
    tr__call_frame(&b, 9, "one", "x", 1, wa, 1);
    out.push_back(take(&b));
    tr__result_frame_ref(&b, 8, "0123456789abcdef");
    out.push_back(take(&b));
    tr__caller_frame(&b, 3, 0, 0);
    out.push_back(take(&b));
    tr__caller_frame(&b, 4, 1, 7);
    out.push_back(take(&b));
    tr__result_frame_kept(&b, 9, "0123456789abcdef", "data", 4);
    out.push_back(take(&b));
    tr__result_frame(&b, 7, TR_ETASK, "boom", 5);
    out.push_back(take(&b));
    tr__enc_map(&b, 4);
    tr__enc_str(&b, "key");
    tr__enc_str(&b, "some/key");
    tr__enc_str(&b, "id");
    tr__enc_bin(&b, "0123456789abcdef", 16);
    tr__enc_str(&b, "list");
    tr__enc_array(&b, 3);
    tr__enc_double(&b, 1.5);
    tr__enc_int(&b, -70000);
    tr__enc_nil(&b);
    tr__enc_str(&b, "flag");
    tr__enc_bool(&b, true);
    std::string map = take(&b);
    out.push_back(map);
    tr__frame_put_hdr(&b, TR__MSG_KV_PUT, 3, map.size());
    tr__buf_append(&b, map.data(), map.size());
    out.push_back(take(&b));
    tr_config *cfg;
    tr__config_create(&cfg);
    tr__config_set(cfg, "resources", "slot=2,memory=17179869184");
    tr__config_encode_node(cfg, &b);
    tr__config_destroy(cfg);
    out.push_back(take(&b));
    /* another node's trace bundle (core/trace.h): a process in a group, three ops */
    auto *h = (tr__trace_hdr *)aligned_alloc(64, sizeof(tr__trace_hdr)); /* (its alignment) */
    memset(h, 0, sizeof *h);
    h->magic = TR__TRACE_MAGIC;
    h->size = sizeof *h;
    h->pid = 4242;
    h->copy = 1;
    strcpy(h->label, "Worker");
    strcpy(h->groups[0].name, "g");
    h->groups[0].world = 2;
    h->groups[0].ops = 3;
    for (int i = 0; i < 3; i++) {
        h->groups[0].ring[i].seq = (uint64_t)i + 1;
        h->groups[0].ring[i].kind = 2;
        h->groups[0].ring[i].state = i < 2 ? TR__FL_COMPLETED : TR__FL_STARTED;
    }
    uint32_t rec[2] = {0x31425254u, (uint32_t)offsetof(tr__trace_hdr, ev)};
    std::string bundle((const char *)rec, sizeof rec);
    bundle.append((const char *)h, rec[1]);
    free(h);
    out.push_back(bundle);
    out.push_back(
        "{\"t\":\"1.5\",\"event\":\"actor_created\",\"id\":\"ab\",\"class\":\"C\\u0001\"}\n"
        "{\"t\":\"2\",\"event\":\"actor_died\",\"id\":\"ab\",\"reason\":\"x\\\"y\"}\n");
    /* another node's list answers (api/cmd/merge.h): JSON, a table, a summary */
    out.push_back(
        "{\"kind\":\"groups\",\"items\":[{\"id\":\"g\",\"world\":2,\"ranks\":[{\"rank\":0,"
        "\"dead\":false}],\"node\":\"h:1\"},{\"id\":\"\\\"]}\"}],\"total\":3,"
        "\"matched\":2,\"offset\":0,\"limit\":100}");
    out.push_back("ID  STATE\nab  ALIVE\n(1 shown of 1 matched, 2 in all)\n");
    out.push_back("{\"kind\":\"actors\",\"total\":2,\"by_state\":{\"ALIVE\":2},\"by_class\":"
                  "{\"C\":{\"ALIVE\":2}}}");
    return out;
}

TEST(Fuzz, SeedsMutationsAndRandomBytes) {
    auto s = seeds();
    for (auto &x : s)
        LLVMFuzzerTestOneInput((const uint8_t *)x.data(), x.size());
    std::mt19937_64 rng(0x7472);
    for (int iter = 0; iter < 30000; iter++) {
        std::string in;
        if (iter % 5 == 0) {
            in.resize(rng() % 96);
            for (auto &c : in)
                c = (char)rng();
        } else {
            in = s[rng() % s.size()];
            int muts = 1 + (int)(rng() % 6);
            for (int m = 0; m < muts && !in.empty(); m++) {
                size_t at = rng() % in.size();
                switch (rng() % 5) {
                case 0:
                    in[at] = (char)rng();
                    break;
                case 1:
                    in.resize(at);
                    break;
                case 2:
                    in.insert(at, 1, (char)rng());
                    break;
                case 3:
                    in[at] = (char)(0xc0 | (rng() % 0x40));
                    break; /* type bytes */
                default:
                    in += s[rng() % s.size()];
                    break; /* concatenation */
                }
            }
        }
        LLVMFuzzerTestOneInput((const uint8_t *)in.data(), in.size());
    }
    SUCCEED();
}

} // namespace
